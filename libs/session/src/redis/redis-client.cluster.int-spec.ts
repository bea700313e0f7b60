import { PrivateRedisCluster, sleep } from '@loom/testing';
import { createRedis } from '../session.providers';
import { pingRedis } from './redis-client';

/**
 * The readiness probe's Redis check on a Redis Cluster of this file's own: a PING goes to one
 * pooled node, and a dead master leaves the pool, so it alone answered "up" with a third of the
 * slots unreachable.
 */
describe('pingRedis on a Redis Cluster', () => {
  let cluster: PrivateRedisCluster;
  beforeAll(async () => (cluster = await PrivateRedisCluster.start()));
  afterAll(() => cluster?.stop());

  it('answers while every master does, and fails every time one is down', async () => {
    const redis = createRedis({ url: cluster.url, clusterNodes: cluster.seeds }, 'ping-probe');
    redis.on('error', () => undefined);
    try {
      if (redis.status !== 'ready') await new Promise((ok) => redis.once('ready', ok));
      await expect(pingRedis(redis)).resolves.toBeUndefined();

      await cluster.kill(cluster.ports[1]);
      for (let i = 0; i < 6; i++) {
        await expect(pingRedis(redis)).rejects.toThrow();
        await sleep(200);
      }
    } finally {
      redis.disconnect();
    }
  });
});
