import Redis from 'ioredis';
import { PrivateRedisCluster } from '@loom/testing';
import { requestStreamKey } from './redis-streams.options';
import { RedisStreamsServer } from './redis-streams.server';

// The chaos audit on a cluster (seed 4242): an agent started while its request stream's master
// answered CLUSTERDOWN (rejoining after a restart) exited on an unhandled rejection.
describe('RedisStreamsServer on a Redis Cluster: starting while a master is away', () => {
  let cluster: PrivateRedisCluster;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('creates its consumer group once the slot is served again, instead of failing to start', async () => {
    const keyPrefix = `start${Date.now()}:`;
    const pattern = 'agent.start.execute';
    const key = requestStreamKey(keyPrefix, pattern);
    const owner = new Redis(await cluster.portOf(key), '127.0.0.1');
    const slot = Number(await owner.cluster('KEYSLOT', key));
    // The slot's master no longer serves it: CLUSTERDOWN for its commands, for 3 s.
    await owner.cluster('DELSLOTS', slot);
    const restored = new Promise<void>((resolve) =>
      setTimeout(() => void owner.cluster('ADDSLOTS', slot).then(() => resolve()), 3_000),
    );
    const server = new RedisStreamsServer({
      redisUrl: cluster.url,
      redisClusterNodes: cluster.seeds,
      keyPrefix,
      blockMs: 200,
    });
    server.addHandler(pattern, async () => 'ok');
    try {
      const err = await new Promise<unknown>((resolve) =>
        server.listen((e?: unknown) => resolve(e)),
      );
      expect(err).toBeUndefined();
      await restored;
      const groups = (await owner.xinfo('GROUPS', key)) as unknown[];
      expect(groups).toHaveLength(1);
    } finally {
      await restored;
      await server.close();
      owner.disconnect();
    }
  }, 60_000);
});
