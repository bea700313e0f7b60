import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { CONSUMER_GROUP, RedisStreamsClient, requestStreamKey } from './index';
import { retireRequestStream } from './redis-streams.retire';

const PATTERN = 'agent.gone.execute';
const RETIRED = { code: 'AGENT_FAILED', message: 'the agent type gone was retired' };

/** Retiring the request stream of an agent type nobody serves again (real Redis). */
describe('redis streams: retiring a request stream', () => {
  const prefix = createTestPrefix();
  let redis: Redis;
  let client: RedisStreamsClient;

  beforeAll(async () => {
    redis = new Redis(TEST_REDIS_URL);
    // A caller that would wait a minute for an answer nobody gives.
    client = new RedisStreamsClient({
      redisUrl: TEST_REDIS_URL,
      keyPrefix: prefix.prefix,
      timeoutMs: 60_000,
      blockMs: 100,
    });
    await client.connect();
  });
  afterAll(async () => {
    await client.close();
    redis.disconnect();
    await prefix.cleanup();
  });

  it('fails the requests still waiting at once, pending ones included, and deletes the stream', async () => {
    const key = requestStreamKey(prefix.prefix, PATTERN);
    const first = lastValueFrom(client.send(PATTERN, { n: 1 })).catch((err: unknown) => err);
    const second = lastValueFrom(client.send(PATTERN, { n: 2 })).catch((err: unknown) => err);
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
});
