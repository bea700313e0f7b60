import { clusterNode, withoutCredentials } from './redis-client';

/**
 * Where each node a Redis Cluster announces is reached instead: ioredis' `natMap`. Keyed as
 * ioredis looks nodes up, `host:port` of `CLUSTER SLOTS` and MOVED/ASK (an IPv6 host bare,
 * `::1:6379`, as Redis writes it).
 */
export type ClusterNatMap = Record<string, { host: string; port: number }>;

/**
 * REDIS_CLUSTER_NAT_MAP (`announced=reachable,…`, each side `host:port`, an IPv6 host in
 * brackets) as a {@link ClusterNatMap}; throws naming a malformed pair or a repeated address.
 */
export function parseClusterNatMap(text: string | undefined): ClusterNatMap {
  const map: ClusterNatMap = {};
  const entries = (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const entry of entries) {
    const [announced, reachable] = pair(entry);
    const key = `${announced.host}:${announced.port}`;
    // Two targets for one node: which one ioredis took would depend on the order of the text.
    if (Object.hasOwn(map, key)) throw new Error(`"${entry}" maps ${key} a second time`);
    map[key] = reachable;
  }
  return map;
}

/** `announced=reachable` as its two nodes; throws naming the whole pair when either side is bad. */
function pair(entry: string): Array<{ host: string; port: number }> {
  const sides = entry.split('=');
  try {
    if (sides.length === 2) return sides.map(clusterNode);
  } catch {
    // named below, as the whole pair: which side is wrong is plain from it
  }
  throw new Error(
    `"${withoutCredentials(entry)}" is not announced=reachable with each side host:port`,
  );
}
