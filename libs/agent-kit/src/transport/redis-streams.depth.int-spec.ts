import { openRedis, RedisClient } from '@loom/session';
import { createTestPrefix, redisTargetFor } from '@loom/testing';
import { CONSUMER_GROUP, deadLetterStreamKey, requestStreamKey } from './index';
import { requestQueueDepth } from './redis-streams.depth';

const PATTERN = 'agent.depth-law.execute';

/**
 * The depth of a request stream as the orchestrator's /metrics reads it (real Redis), driven
 * step by step with the commands the transport sends: standalone, and on a Redis Cluster of the
 * suite's own, where the request stream sits on one master among three.
 */
describe.each(['standalone', 'cluster'] as const)(
  'redis streams (%s): request queue depth',
  (mode) => {
    const prefix = createTestPrefix();
    let stopRedis = async (): Promise<void> => undefined;
    let redis: RedisClient;

    beforeAll(async () => {
      const { target, stop } = await redisTargetFor(mode);
      stopRedis = stop;
      redis = openRedis(target);
    });
    afterAll(async () => {
      redis.disconnect();
      await prefix.cleanup();
      await stopRedis();
    });

    it("counts undelivered, pending and dead-lettered requests through the transport's steps", async () => {
      const key = requestStreamKey(prefix.prefix, PATTERN);
      const depth = () => requestQueueDepth(redis, prefix.prefix, PATTERN);
      const request = (n: number) => redis.xadd(key, '*', 'id', `r${n}`, 'data', '{}');

      // Nothing was ever sent.
      expect(await depth()).toEqual({ pending: 0, lag: 0, deadLetters: 0 });
      // Sent while no instance ever started: no group yet, both wait.
      const first = (await request(1))!;
      await request(2);
      expect(await depth()).toEqual({ pending: 0, lag: 2, deadLetters: 0 });
      // An instance starts (its group begins at the stream's start) and takes one.
      await redis.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
      expect(await depth()).toEqual({ pending: 0, lag: 2, deadLetters: 0 });
      await redis.xreadgroup('GROUP', CONSUMER_GROUP, 'c1', 'COUNT', 1, 'STREAMS', key, '>');
      expect(await depth()).toEqual({ pending: 1, lag: 1, deadLetters: 0 });
      // It answers: XACK + XDEL, as every reply does. Redis still tells the lag past the deletion.
      await redis.xack(key, CONSUMER_GROUP, first);
      await redis.xdel(key, first);
      expect(await depth()).toEqual({ pending: 0, lag: 1, deadLetters: 0 });
      // A request delivered too often is copied to the dead-letter stream (same slot).
      await redis.xadd(deadLetterStreamKey(prefix.prefix, PATTERN), '*', 'id', 'r0');
      expect(await depth()).toEqual({ pending: 0, lag: 1, deadLetters: 1 });
    });
  },
);
