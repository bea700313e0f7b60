import { RedisClient, openRedis } from '@loom/session';
import { createTestPrefix, redisTargetFor } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { CONSUMER_GROUP, RedisStreamsClient, requestStreamKey } from './index';
import { retireRequestStream } from './redis-streams.retire';

const PATTERN = 'agent.gone.execute';
const RETIRED = { code: 'AGENT_FAILED', message: 'the agent type gone was retired' };

/**
 * Retiring the request stream of an agent type nobody serves again (real Redis): standalone, and
 * on a Redis Cluster of the suite's own, where the two callers' reply streams sit in other slots
 * than the request stream (one MULTI each there).
 */
describe.each(['standalone', 'cluster'] as const)(
  'redis streams (%s): retiring a request stream',
  (mode) => {
    const prefix = createTestPrefix();
    let stopRedis = async (): Promise<void> => undefined;
    let redis: RedisClient;
    let clients: RedisStreamsClient[];

    beforeAll(async () => {
      const { target, stop } = await redisTargetFor(mode);
      stopRedis = stop;
      redis = openRedis(target);
      // Callers that would wait a minute for an answer nobody gives.
      clients = [1, 2].map(
        () =>
          new RedisStreamsClient({
            redisUrl: target.url,
            redisClusterNodes: target.clusterNodes ? [...target.clusterNodes] : undefined,
            keyPrefix: prefix.prefix,
            timeoutMs: 60_000,
            blockMs: 100,
          }),
      );
      await Promise.all(clients.map((c) => c.connect()));
    });
    afterAll(async () => {
      await Promise.all(clients.map((c) => c.close()));
      redis.disconnect();
      await prefix.cleanup();
      await stopRedis();
    });

    it('fails the requests still waiting at once, pending ones included, and deletes the stream', async () => {
      const key = requestStreamKey(prefix.prefix, PATTERN);
      const first = lastValueFrom(clients[0].send(PATTERN, { n: 1 })).catch((err: unknown) => err);
      const second = lastValueFrom(clients[1].send(PATTERN, { n: 2 })).catch((err: unknown) => err);
      // A past request whose caller stopped waiting long ago.
      await redis.xadd(
        key,
        '*',
        'id',
        'old',
        'replyTo',
        `${prefix.prefix}rpc:reply:x`,
        'deadline',
        '1',
      );
      while ((await redis.xlen(key)) < 3) await new Promise((r) => setTimeout(r, 10));
      // An instance that died holding the first: pending on its consumer.
      await redis.xgroup('CREATE', key, CONSUMER_GROUP, '0');
      await redis.xreadgroup(
        'GROUP',
        CONSUMER_GROUP,
        'dead-instance',
        'COUNT',
        1,
        'STREAMS',
        key,
        '>',
      );

      const retired = await retireRequestStream(redis, prefix.prefix, PATTERN, RETIRED);
      expect(retired).toEqual({ failed: 2, expired: 1, deleted: true });
      expect(await first).toMatchObject(RETIRED);
      expect(await second).toMatchObject(RETIRED);
      expect(await redis.exists(key)).toBe(0);
      // Nothing left to retire: a second run finds nothing.
      expect(await retireRequestStream(redis, prefix.prefix, PATTERN, RETIRED)).toEqual({
        failed: 0,
        expired: 0,
        deleted: true,
      });
    });
  },
);
