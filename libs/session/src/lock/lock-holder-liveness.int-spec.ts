import { once } from 'events';
import { PrivateRedisServer } from '@loom/testing';
import { createRedis } from '../session.providers';
import { LockHolderLiveness } from './lock-holder-liveness';
import { RedisClient } from '../redis/redis-client';

/**
 * A Redis of the suite's own, restarted empty under a holder: its liveness key is gone, and the
 * holder writes it again as soon as its connection is ready, not at its next beat.
 */
describe('LockHolderLiveness across a Redis restart', () => {
  let server: PrivateRedisServer;
  let redis: RedisClient;

  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    redis = createRedis(server.url, 'liveness-test');
    redis.on('error', () => undefined);
    if (redis.status !== 'ready') await once(redis, 'ready');
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.kill();
  });

  it('writes its key again once the connection is ready, while it holds a lock', async () => {
    const liveness = new LockHolderLiveness(redis, (id) => `lh:${id}`);
    const token = liveness.token();
    liveness.enter();
    await redis.ping(); // the first beat, sent before it, has landed
    expect(await liveness.gone(token)).toBe(false);

    // Listened for before the restart: the client may be ready again before restart() returns.
    let ready = once(redis, 'ready');
    await server.kill();
    await server.restart();
    await ready;
    // Sent on the same connection after the beat the 'ready' listener sent.
    await redis.ping();
    expect(await redis.exists(`lh:${liveness.id}`)).toBe(1);
    expect(await liveness.gone(token)).toBe(false);

    liveness.leave();
    ready = once(redis, 'ready');
    await server.kill();
    await server.restart();
    await ready;
    await redis.ping();
    // No lock waited for or held: nothing is written.
    expect(await redis.exists(`lh:${liveness.id}`)).toBe(0);
  });
});
