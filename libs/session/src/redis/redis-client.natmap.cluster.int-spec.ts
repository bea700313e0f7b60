import { once } from 'events';
import Redis from 'ioredis';
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

  /** MOVED replies every master has sent so far (INFO errorstats). */
  const movedReplies = async () => {
    let total = 0;
    for (const port of cluster.ports) {
      const node = new Redis(port, '127.0.0.1');
      try {
        const info = await node.info('errorstats');
        total += Number(/errorstat_MOVED:count=(\d+)/.exec(info)?.[1] ?? 0);
      } finally {
        node.disconnect();
      }
    }
    return total;
  };
  /** `count` keys of one slot, and that slot, held now by the master at `port`. */
  const keysOn = async (redis: RedisClient, port: number, count: number) => {
    for (let tag = 0; ; tag++) {
      const key = `natmap:moving:{t${tag}}`;
      if ((await cluster.portOf(key)) !== port) continue;
      const slot = Number(await redis.cluster('KEYSLOT', key));
      return { slot, keys: Array.from({ length: count }, (_, i) => `${key}:${i}`) };
    }
  };
  /**
   * Every command of `keys` at once: each must succeed, redirected once at most. ioredis follows
   * a MOVED to the address the reply names, which is the master's own (unmapped) one, and looks
   * that up in a pool that holds nodes by their mapped address: it found none and sent the
   * command to a random master, which moved it again, until 16 redirections ran out ("Too many
   * Cluster redirections"), the slot table broken again by every MOVED meanwhile.
   */
  const allRedirectedOnce = async (redis: RedisClient, run: () => Promise<unknown>[]) => {
    // Every node connection open (a busy client's are): a command moved to one still connecting
    // is refused there ("Connection is closed", the Cluster client has no offline queue) and
    // retried on a random master, which ioredis does mapped or not.
    if (isCluster(redis)) await Promise.all(redis.nodes('master').map((node) => node.ping()));
    const before = await movedReplies();
    const settled = await Promise.allSettled(run());
    const failed = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
    expect(failed.map((s) => String(s.reason)).slice(0, 3)).toEqual([]);
    // Each command went to the old owner (MOVED) and then straight to the new one.
    expect((await movedReplies()) - before).toBeLessThanOrEqual(settled.length);
  };

  it('follows a slot that moves to another master (a reshard, a failover) through the map: no command fails', async () => {
    const redis = await ready(
      createRedis({ ...seedsAtProxies(), natMap: natMap() }, 'natmap-move'),
    );
    const [a, b, c] = cluster.ports;
    const { slot, keys } = await keysOn(redis, a, 1000);
    await redis.set(keys[0], 'before');

    await cluster.moveSlot(slot, b);
    await allRedirectedOnce(redis, () => keys.map((key) => redis.set(key, key)));
    expect(await redis.get(keys[999])).toBe(keys[999]);

    // A second connection (duplicateRedis) keeps it, pipelined (the polled delta reader's).
    const reader = await ready(duplicateRedis(redis, { enableAutoPipelining: true }));
    await cluster.moveSlot(slot, c);
    await allRedirectedOnce(reader, () => keys.map((key) => reader.get(key)));
    expect(await reader.get(keys[0])).toBe(keys[0]);
    expect(heldPorts(reader)).toEqual(proxyPorts());
  });

  it('reads keys of a slot half-way through a reshard (ASK) through the map, pipelined and in MULTI', async () => {
    const redis = await ready(createRedis({ ...seedsAtProxies(), natMap: natMap() }, 'natmap-ask'));
    const [a, b] = cluster.ports;
    const { slot, keys } = await keysOn(redis, a, 10);
    for (const key of keys) await redis.set(key, key);
    // The delta reader's connection: auto-pipelined, so a pipeline's redirect path.
    const reader = await ready(duplicateRedis(redis, { enableAutoPipelining: true }));

    // Half its keys already on b: for those, a answers ASK naming b's own address.
    const finish = await cluster.startSlotMove(slot, b, keys.slice(0, 5));
    try {
      const moved = keys.slice(0, 5);
      expect(await Promise.all(moved.map((key) => reader.get(key)))).toEqual(moved);
      expect(await Promise.all(keys.map((key) => redis.get(key)))).toEqual(keys);
      // A MULTI of one moved key (as the reply path's XACK + XDEL is one of their stream).
      expect(await redis.multi().get(keys[0]).exec()).toEqual([[null, keys[0]]]);
    } finally {
      await finish();
    }
  });

  it("without the map, the same seeds leave the client at the masters' own ports: unreachable behind NAT", async () => {
    const redis = await ready(createRedis(seedsAtProxies(), 'natmap-none'));
    // Once ready, the client has replaced its seeds by the nodes CLUSTER SLOTS announced.
    expect(heldPorts(redis)).toEqual([...cluster.ports].sort());
    expect(heldPorts(redis)).not.toContain(proxies[0].port);
  });
});
