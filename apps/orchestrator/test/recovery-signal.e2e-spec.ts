import Redis from 'ioredis';
import { createRedis, RedisKeys, SessionInfra } from '@loom/session';
import { FreezableTcpProxy, PrivateRedisCluster, PrivateRedisServer, sleep } from '@loom/testing';
import { RecoveryDue, RecoverySignal } from '../src/recovery/recovery-signal';

/** The session connection's options (createRedis): fails fast while Redis is away. */
const sessionRedis = (url: string) =>
  new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: 2000,
    retryStrategy: (times) => Math.min(times * 100, 2000),
  });

describe('RecoverySignal: a replica started while Redis is away hears signals once it is back', () => {
  let server: PrivateRedisServer;
  const prefix = 'r2sig:';
  afterAll(async () => server?.kill());

  it('subscribes when Redis comes back, not only when it answers at start', async () => {
    server = await PrivateRedisServer.start();
    await server.kill(); // Redis away when the orchestrator boots (it starts anyway)
    const redis = sessionRedis(server.url);
    redis.on('error', () => undefined);
    const infra = { redis, keys: new RedisKeys(prefix) } as unknown as SessionInfra;
    const signal = new RecoverySignal(infra, 'listener');
    const heard: RecoveryDue[] = [];
    signal.listen((due) => heard.push(due));
    await sleep(1500); // several reconnect attempts while Redis is down
    await server.restart();
    const publisher = new Redis(server.url);
    try {
      for (let i = 0; i < 60 && heard.length === 0; i++) {
        await publisher.publish(
          `${prefix}recovery:due`,
          JSON.stringify({ from: 'other', inMs: 0 }),
        );
        await sleep(100);
      }
      expect(heard).toEqual([{ from: 'other', inMs: 0 }]);
      // And again after Redis restarts (ioredis resubscribes what it had subscribed).
      publisher.disconnect();
      await server.kill();
      await sleep(1000);
      await server.restart();
      const again = new Redis(server.url);
      try {
        for (let i = 0; i < 60 && heard.length === 1; i++) {
          await again.publish(`${prefix}recovery:due`, JSON.stringify({ from: 'other', inMs: 5 }));
          await sleep(100);
        }
      } finally {
        again.disconnect();
      }
      expect(heard).toEqual([
        { from: 'other', inMs: 0 },
        { from: 'other', inMs: 5 },
      ]);
    } finally {
      publisher.disconnect();
      signal.onApplicationShutdown();
      redis.disconnect();
    }
  });
});

describe('RecoverySignal: a replica whose Redis host vanished without a reset hears signals again', () => {
  let server: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  const prefix = 'r2sigs:';
  afterAll(async () => {
    await proxy?.close();
    await server?.kill();
  });

  it('notices its stranded subscription and subscribes again at the address', async () => {
    server = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: server.port });
    const redis = sessionRedis(`redis://127.0.0.1:${proxy.port}`);
    redis.on('error', () => undefined);
    const infra = { redis, keys: new RedisKeys(prefix) } as unknown as SessionInfra;
    const signal = new RecoverySignal(infra, 'listener');
    const heard: RecoveryDue[] = [];
    signal.listen((due) => heard.push(due));
    const publisher = new Redis(server.url);
    const publishUntilHeard = async (count: number, inMs: number, tries: number) => {
      for (let i = 0; i < tries && heard.length < count; i++) {
        await publisher.publish(`${prefix}recovery:due`, JSON.stringify({ from: 'other', inMs }));
        await sleep(200);
      }
    };
    try {
      await publishUntilHeard(1, 0, 50);
      expect(heard).toEqual([{ from: 'other', inMs: 0 }]);
      // The host behind the address is gone (no reset); the address now leads to a live Redis.
      // The idle subscriber wrote nothing, so TCP told it nothing: it never heard a signal again.
      proxy.strand();
      await publishUntilHeard(2, 5, 150);
      expect(heard).toEqual([
        { from: 'other', inMs: 0 },
        { from: 'other', inMs: 5 },
      ]);
    } finally {
      publisher.disconnect();
      signal.onApplicationShutdown();
      redis.disconnect();
    }
  }, 60_000);
});

describe('RecoverySignal on a Redis Cluster: every replica hears a signal, whichever node it reaches', () => {
  let cluster: PrivateRedisCluster;
  afterAll(async () => cluster?.stop());

  it("delivers one replica's signal to the others, not to itself", async () => {
    cluster = await PrivateRedisCluster.start();
    const target = { url: cluster.url, clusterNodes: cluster.seeds };
    const replicas = ['one', 'two', 'three'].map((id) => {
      const redis = createRedis(target, `signal-${id}`);
      redis.on('error', () => undefined);
      const infra = { redis, keys: new RedisKeys('r2sigc:') } as unknown as SessionInfra;
      const heard: RecoveryDue[] = [];
      const signal = new RecoverySignal(infra, id);
      return { redis, signal, heard };
    });
    try {
      for (const r of replicas) {
        if (r.redis.status !== 'ready') await new Promise((ok) => r.redis.once('ready', ok));
        r.signal.listen((due) => r.heard.push(due));
      }
      // Subscribing takes a moment: signal until both others have heard (a hint, at most once).
      for (let i = 0; i < 60 && replicas.some((r, n) => n > 0 && r.heard.length === 0); i++) {
        await replicas[0].signal.publish(7);
        await sleep(100);
      }
      expect(replicas[0].heard).toEqual([]);
      for (const r of replicas.slice(1)) expect(r.heard[0]).toEqual({ from: 'one', inMs: 7 });
    } finally {
      for (const r of replicas) {
        r.signal.onApplicationShutdown();
        r.redis.disconnect();
      }
    }
  });
});

describe('RecoverySignal on a Redis Cluster whose node vanished without a reset', () => {
  let cluster: PrivateRedisCluster;
  let proxies: FreezableTcpProxy[] = [];
  afterAll(async () => {
    await Promise.all(proxies.map((proxy) => proxy.close()));
    await cluster?.stop();
  });

  it('notices its stranded subscription and subscribes again', async () => {
    cluster = await PrivateRedisCluster.start();
    proxies = await Promise.all(
      cluster.ports.map((port) => FreezableTcpProxy.start({ host: '127.0.0.1', port })),
    );
    // Each master reached through its proxy (REDIS_CLUSTER_NAT_MAP), as a node behind NAT.
    const natMap = Object.fromEntries(
      cluster.ports.map((port, i) => [
        `127.0.0.1:${port}`,
        { host: '127.0.0.1', port: proxies[i].port },
      ]),
    );
    const proxied = proxies.map((proxy) => `127.0.0.1:${proxy.port}`);
    const target = { url: `redis://${proxied[0]}`, clusterNodes: proxied, natMap };
    const listener = createRedis(target, 'signal-listener');
    listener.on('error', () => undefined);
    const publisher = createRedis({ url: cluster.url, clusterNodes: cluster.seeds }, 'publisher');
    publisher.on('error', () => undefined);
    const prefix = 'r2sigcs:';
    const signal = new RecoverySignal(
      { redis: listener, keys: new RedisKeys(prefix) } as unknown as SessionInfra,
      'listener',
    );
    const heard: RecoveryDue[] = [];
    const publishUntilHeard = async (count: number, inMs: number, tries: number) => {
      for (let i = 0; i < tries && heard.length < count; i++) {
        await publisher
          .publish(`${prefix}recovery:due`, JSON.stringify({ from: 'other', inMs }))
          .catch(() => undefined);
        await sleep(200);
      }
    };
    try {
      for (const r of [listener, publisher])
        if (r.status !== 'ready') await new Promise((ok) => r.once('ready', ok));
      signal.listen((due) => heard.push(due));
      await publishUntilHeard(1, 0, 50);
      expect(heard).toEqual([{ from: 'other', inMs: 0 }]);
      // Every node's host gone without a reset, each address now leading to a live node: the
      // subscription's own connection heard nothing, ever again.
      proxies.forEach((proxy) => proxy.strand());
      await publishUntilHeard(2, 5, 150);
      expect(heard).toEqual([
        { from: 'other', inMs: 0 },
        { from: 'other', inMs: 5 },
      ]);
    } finally {
      signal.onApplicationShutdown();
      listener.disconnect();
      publisher.disconnect();
    }
  }, 90_000);
});
