import Redis, { Cluster, RedisOptions } from 'ioredis';
import type { ClusterNatMap } from './cluster-nat-map';

/**
 * A connection to standalone Redis or a Redis Cluster client. Both speak the same command
 * interface; the few places that differ (SCAN, INFO, MULTI across slots, duplicate) ask
 * {@link isCluster}.
 */
export type RedisClient = Redis | Cluster;

/** Where Redis is: `url` alone is one endpoint; with `clusterNodes`, the seeds of a Cluster. */
export interface RedisTarget {
  /** `redis[s]://[user:password@]host[:port][/db]`; on a cluster, its credentials and TLS. */
  url: string;
  /** `host:port` seeds of a Redis Cluster (REDIS_CLUSTER_NODES); none: standalone. */
  clusterNodes?: readonly string[];
  /**
   * A cluster's announced `host:port` → where it is reached (REDIS_CLUSTER_NAT_MAP), for nodes
   * behind NAT or port mapping; unmapped nodes are reached where they say.
   */
  natMap?: ClusterNatMap;
}

export function isCluster(redis: RedisClient): redis is Cluster {
  return redis.isCluster;
}

/**
 * Opens `target` with `options` (and {@link readOnlyReplica} unless they say otherwise):
 * `new Redis(url, options)` for one endpoint; for a cluster, a Cluster client that sends every
 * command to its slot's master, each node connection with `options` and the URL's user,
 * password and TLS, at the address `target.natMap` gives for the one the node announces.
 */
export function openRedis(target: RedisTarget, options: RedisOptions = {}): RedisClient {
  options = { reconnectOnError: readOnlyReplica, ...options };
  if (!target.clusterNodes?.length) return timeoutPerSocket(new Redis(target.url, options));
  const url = new URL(target.url);
  const { retryStrategy, enableOfflineQueue, lazyConnect, ...nodeOptions } = options;
  const cluster = new Cluster(target.clusterNodes.map(clusterNode), {
    redisOptions: {
      ...nodeOptions,
      username: decodeURIComponent(url.username) || undefined,
      password: decodeURIComponent(url.password) || undefined,
      tls: url.protocol === 'rediss:' ? {} : undefined,
    },
    enableOfflineQueue: enableOfflineQueue ?? true,
    lazyConnect,
    scaleReads: 'master',
    natMap: target.natMap,
    // Reconnects to the cluster as `options` would to one server (undefined: ioredis' default).
    clusterRetryStrategy: retryStrategy ? (times) => retryStrategy(times) : undefined,
  });
  return timeoutPerSocket(redirectThroughNatMap(cluster));
}

/**
 * Every connection's default `reconnectOnError`: a failover that demotes the primary (Sentinel,
 * a managed Redis) leads the URL's name to the new primary, but a connection already open stays
 * on the old one, now a replica that refuses every write (READONLY) for good. It connects again;
 * the refused command fails (nothing ran), and its caller's error handling takes it from there.
 */
function readOnlyReplica(err: Error): boolean {
  return err.message.startsWith('READONLY');
}

/**
 * A second connection to the same Redis (a blocking reader), with `override` applied; on a
 * cluster, `enableOfflineQueue` and `enableAutoPipelining` are the Cluster client's own, and the
 * rest of its options (`natMap` too) are the original's.
 */
export function duplicateRedis(redis: RedisClient, override: RedisOptions = {}): RedisClient {
  if (!isCluster(redis)) return timeoutPerSocket(redis.duplicate(override));
  const { enableOfflineQueue, enableAutoPipelining, ...nodeOptions } = override;
  return timeoutPerSocket(
    redirectThroughNatMap(
      redis.duplicate(undefined, {
        ...(enableOfflineQueue === undefined ? {} : { enableOfflineQueue }),
        ...(enableAutoPipelining === undefined ? {} : { enableAutoPipelining }),
        redisOptions: { ...redis.options.redisOptions, ...nodeOptions },
      }),
    ),
  );
}

/** ioredis' (5.x) timer of a connection's `socketTimeout`, armed while a command is unanswered. */
interface SocketTimeoutTimer {
  socketTimeoutTimer?: NodeJS.Timeout;
}

/**
 * Makes `socketTimeout` watch each socket of `redis` (a Cluster's: of each node connection)
 * alone. ioredis (5.11, redis/ioredis#2147) keeps the timer of a command that a closed socket
 * left unanswered, and arms no other while it exists: socketTimeout after that command, it
 * destroyed the socket of that moment, a new and healthy one (what was in flight on it failed
 * or ran again, a blocked read was cut off), and it held a process that had closed everything
 * else open. Each close clears it; a command sent on the next socket arms its own.
 */
function timeoutPerSocket<T extends RedisClient>(redis: T): T {
  const clearOnClose = (connection: Redis): void => {
    connection.on('close', () => {
      const internal = connection as unknown as SocketTimeoutTimer;
      clearTimeout(internal.socketTimeoutTimer);
      internal.socketTimeoutTimer = undefined;
    });
  };
  if (isCluster(redis)) redis.on('+node', clearOnClose);
  else clearOnClose(redis);
  return redis;
}

/** A redirect's handler in ioredis' Cluster: the slot, and `host:port` of the node to try. */
type Redirect = (slot: string, key: string) => void;

/** The members of ioredis' Cluster that {@link redirectThroughNatMap} wraps (5.x). */
interface ClusterRedirects {
  handleError(error: Error, ttl: object, handlers: { moved: Redirect; ask: Redirect }): void;
  natMapper(node: string | { host: string; port: number }): { host: string; port: number };
}

/**
 * Makes `cluster` follow MOVED and ASK to where its natMap says their node is reached. ioredis
 * (5.11, redis/ioredis#1582) puts a MOVED reply's address, the one the node announces, in its
 * slot table as is, while its pool holds every node at its mapped address: the retry found no
 * node there and went to a random master, which moved it again, and a slot that moved (a
 * reshard, a failover) failed commands with "Too many Cluster redirections"; a pipeline's
 * MOVED and ASK alike. Each redirect is handed on with the mapped address instead, which ioredis
 * then keeps as is (it maps an address once, never a mapped one again). Without a natMap,
 * `cluster` as it is.
 */
function redirectThroughNatMap(cluster: Cluster): Cluster {
  if (!cluster.options.natMap) return cluster;
  const internals = cluster as unknown as ClusterRedirects;
  const handleError = internals.handleError.bind(cluster);
  const natMapper = internals.natMapper.bind(cluster);
  let mappedNow: string | undefined;
  internals.natMapper = (node) => (node === mappedNow ? hostAndPort(mappedNow) : natMapper(node));
  internals.handleError = (error, ttl, handlers) => {
    const redirect =
      (handler: Redirect): Redirect =>
      (slot, key) => {
        const { host, port } = natMapper(key);
        mappedNow = `${host}:${port}`;
        try {
          handler(slot, mappedNow);
        } finally {
          mappedNow = undefined;
        }
      };
    handleError(error, ttl, {
      ...handlers,
      moved: redirect(handlers.moved),
      ask: redirect(handlers.ask),
    });
  };
  return cluster;
}

/** `host:port` as ioredis writes a node's key (an IPv6 host bare) as its host and port. */
function hostAndPort(key: string): { host: string; port: number } {
  const at = key.lastIndexOf(':');
  return { host: key.slice(0, at), port: Number(key.slice(at + 1)) };
}

/**
 * The master serving `key`'s hash slot by the client's slot map (no round trip), or undefined
 * before the map has it; the one server when not a cluster.
 */
export function masterOf(redis: RedisClient, key: string): Redis | undefined {
  if (!isCluster(redis)) return redis;
  const nodeKey = redis.slots[hashSlot(key)]?.[0];
  return nodeKey === undefined
    ? undefined
    : redis.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === nodeKey);
}

/** Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its hash tag, or of the key, mod 16384. */
export function hashSlot(key: string): number {
  const bytes = Buffer.from(key);
  const open = bytes.indexOf('{');
  const close = open < 0 ? -1 : bytes.indexOf('}', open + 1);
  const tagged = close > open + 1 ? bytes.subarray(open + 1, close) : bytes;
  let crc = 0;
  for (const byte of tagged) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/** Every master of a cluster, or the one server. */
export function masters(redis: RedisClient): Redis[] {
  return isCluster(redis) ? redis.nodes('master') : [redis];
}

/**
 * `text` (a node or pair as configured) with whatever precedes an `@` masked: a URL's
 * `user:password@` given where host:port was wanted is quoted in an error printed raw on stderr.
 */
export function withoutCredentials(text: string): string {
  return text.replace(/(^|[=,\s])[^=,\s]*@/g, '$1***@');
}

/** `host:port` (a bracketed IPv6 host too) as a Cluster seed. */
export function clusterNode(seed: string): { host: string; port: number } {
  const match = /^(?:([A-Za-z0-9._-]+)|\[([0-9A-Fa-f:.]+)\]):(\d{1,5})$/.exec(seed.trim());
  const port = Number(match?.[3]);
  if (!match || port < 1 || port > 65535)
    throw new Error(`"${withoutCredentials(seed)}" is not host:port`);
  return { host: match[1] ?? match[2], port };
}

/** REDIS_CLUSTER_NODES (`host:port,host:port`) as seeds; throws naming a bad one. */
export function parseClusterNodes(text: string | undefined): string[] {
  const seeds = (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  seeds.forEach((seed) => clusterNode(seed));
  return seeds;
}

/**
 * The readiness probe's check: PING standalone (as always); on a cluster, every master that
 * `CLUSTER SLOTS` names must answer (see {@link slotMasters}). A plain PING there reaches one
 * pooled node, and a dead master leaves the pool: it would answer with part of the slots
 * unreachable.
 */
export async function pingRedis(redis: RedisClient): Promise<void> {
  await Promise.all((await slotMasters(redis)).map((node) => node.ping()));
}

/**
 * The one server standalone; on a cluster, the pooled connection to every master that
 * `CLUSTER SLOTS` names, or an error naming one the pool does not hold. `CLUSTER SLOTS` names a
 * master as it announces itself; the pool holds it where `natMap` says it is reached. A master
 * that was away (a restart, a dropped connection) leaves the pool for good: only a command of
 * its slots (MOVED) or a refresh of the slot table brings it back, so one missing makes this
 * refresh the table first. What walks every master (the readiness probe, which may be all the
 * traffic an instance taken out of service gets; the whole-cache purge) then skips none.
 */
export async function slotMasters(redis: RedisClient): Promise<Redis[]> {
  if (!isCluster(redis)) return [redis];
  const ranges = (await redis.cluster('SLOTS')) as unknown as Array<
    [number, number, [string, number]]
  >;
  const wanted = [...new Set(ranges.map(([, , [host, port]]) => `${host}:${port}`))];
  let pool = masterPool(redis);
  if (wanted.some((announced) => !pool.has(reachedAt(redis, announced)))) {
    await new Promise<void>((resolve) => redis.refreshSlotsCache(() => resolve()));
    pool = masterPool(redis);
  }
  return wanted.map((announced) => {
    const reached = reachedAt(redis, announced);
    const node = pool.get(reached);
    if (node) return node;
    const at = reached === announced ? announced : `${announced} (at ${reached})`;
    throw new Error(`Redis Cluster master ${at} is not reachable`);
  });
}

/** Where the Cluster client connects for a node announced at `key`: its natMap's entry, or `key`. */
function reachedAt(redis: Cluster, key: string): string {
  const { natMap } = redis.options;
  const mapped = typeof natMap === 'function' ? natMap(key) : natMap?.[key];
  return mapped ? `${mapped.host}:${mapped.port}` : key;
}

function masterPool(redis: Cluster): Map<string, Redis> {
  return new Map(redis.nodes('master').map((node) => [nodeKey(node), node]));
}

function nodeKey(node: Redis): string {
  return `${node.options.host}:${node.options.port}`;
}
