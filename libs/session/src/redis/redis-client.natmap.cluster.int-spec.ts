import { once } from 'events';
import { FreezableTcpProxy, PrivateRedisCluster } from '@loom/testing';
import { createRedis } from '../session.providers';
import { duplicateRedis, isCluster, pingRedis, RedisClient, RedisTarget } from './redis-client';

/**
 * A Redis Cluster of this file's own behind port mapping: each master has a proxy on another
 * port in front of it, as a node behind NAT has its reachable address, while `CLUSTER SLOTS` and
 * MOVED keep naming the master's own port. Loom's client, seeded with the proxies, must reach
 * every master through its proxy, which only the NAT map makes it do.
 */
describe('a Redis Cluster reached through a NAT map (REDIS_CLUSTER_NAT_MAP)', () => {
  let cluster: PrivateRedisCluster;
  let proxies: FreezableTcpProxy[];
  const open: RedisClient[] = [];

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    proxies = await Promise.all(
      cluster.ports.map((port) => FreezableTcpProxy.start({ host: '127.0.0.1', port })),
    );
  });
  afterEach(() => open.splice(0).forEach((redis) => redis.disconnect()));
  afterAll(async () => {
    await Promise.all((proxies ?? []).map((proxy) => proxy.close()));
    await cluster?.stop();
  });

  const proxyPorts = () => proxies.map((proxy) => proxy.port).sort();
  const seedsAtProxies = (): RedisTarget => ({
    url: `redis://127.0.0.1:${proxies[0].port}`,
    clusterNodes: proxies.map((proxy) => `127.0.0.1:${proxy.port}`),
  });
  const natMap = () =>
    Object.fromEntries(
      cluster.ports.map((port, i) => [
        `127.0.0.1:${port}`,
        { host: '127.0.0.1', port: proxies[i].port },
      ]),
    );
  /** A session connection (createRedis: Loom's options), once ready. */
  const ready = async (redis: RedisClient) => {
    open.push(redis);
    redis.on('error', () => undefined);
    if (redis.status !== 'ready') await once(redis, 'ready');
    return redis;
  };
  /** The port of every node connection the Cluster client holds. */
  const heldPorts = (redis: RedisClient) =>
    isCluster(redis)
      ? redis
          .nodes()
          .map((node) => Number(node.options.port))
          .sort()
      : [];

  it("reads and writes keys of every master through the proxies, never at a master's own port", async () => {
    const redis = await ready(createRedis({ ...seedsAtProxies(), natMap: natMap() }, 'natmap'));
    // Fixed keys, so fixed slots: with redis-cli's even split, each master holds some.
    const keys = Array.from({ length: 30 }, (_, i) => `natmap:{k${i}}`);
    for (const key of keys) await redis.set(key, `v-${key}`);
    expect(await Promise.all(keys.map((key) => redis.get(key)))).toEqual(keys.map((k) => `v-${k}`));
    const byMaster = await cluster.keysByMaster('natmap:');
    expect([...byMaster.values()].map((held) => held.length > 0)).toEqual([true, true, true]);

    expect(heldPorts(redis)).toEqual(proxyPorts());
    expect(isCluster(redis) && redis.nodes().every((node) => node.status === 'ready')).toBe(true);
    for (const proxy of proxies) expect(proxy.accepted).toBeGreaterThan(0);
    // The readiness probe finds every master CLUSTER SLOTS names (by its own port) in the pool.
    await expect(pingRedis(redis)).resolves.toBeUndefined();

    // A second connection (a delta reader's, the recovery subscriber's) keeps the map.
    const reader = await ready(duplicateRedis(redis, { connectionName: 'natmap-reader' }));
    expect(await Promise.all(keys.map((key) => reader.get(key)))).toEqual(
      keys.map((k) => `v-${k}`),
    );
    expect(heldPorts(reader)).toEqual(proxyPorts());
  });

  it("without the map, the same seeds leave the client at the masters' own ports: unreachable behind NAT", async () => {
    const redis = await ready(createRedis(seedsAtProxies(), 'natmap-none'));
    // Once ready, the client has replaced its seeds by the nodes CLUSTER SLOTS announced.
    expect(heldPorts(redis)).toEqual([...cluster.ports].sort());
    expect(heldPorts(redis)).not.toContain(proxies[0].port);
  });
});
