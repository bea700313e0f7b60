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

  it('answers again once a master that was down is back, with no other command sent meanwhile', async () => {
    await cluster.restartMaster(cluster.ports[1]); // killed above: every master answers again
    const redis = createRedis({ url: cluster.url, clusterNodes: cluster.seeds }, 'ping-back');
    redis.on('error', () => undefined);
    try {
      if (redis.status !== 'ready') await new Promise((ok) => redis.once('ready', ok));
      await expect(pingRedis(redis)).resolves.toBeUndefined();

      // Down, then back on its port with its slots (a restart): the probe says so while it is
      // down, and the readiness probe is all the traffic an instance taken out of service gets.
      await cluster.restartMaster(cluster.ports[2], 500);
      let answered = false;
      for (let i = 0; i < 50 && !answered; i++) {
        answered = await pingRedis(redis).then(
          () => true,
          () => false,
        );
        if (!answered) await sleep(200);
      }
      expect(answered).toBe(true);
    } finally {
      redis.disconnect();
    }
  });
});
