import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { createTestPrefix, sleep, TEST_REDIS_URL } from '@loom/testing';
import { RedisStreamsClient } from './index';
import { requestStreamKey } from './redis-streams.options';

const PATTERN = 'agent.gone.execute';

/**
 * A request stream whose agent type has no instance (stopped for good, never retired) is read by
 * nobody: its requests are never delivered, so never acknowledged and deleted. Every turn that
 * plans the type (the catalog keeps it for a week) added one for good, the user's question in
 * it. A request past its deadline is worth nothing (an agent skips it): the stream keeps its
 * requests for the client's retention at most.
 */
describe('Redis Streams transport: requests nobody reads (shared redis, own prefix)', () => {
  const prefix = createTestPrefix('loomretention');
  const redis = new Redis(TEST_REDIS_URL);
  const clients: RedisStreamsClient[] = [];
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    redis.disconnect();
    await prefix.cleanup();
  });

  const client = async (retentionMs?: number): Promise<RedisStreamsClient> => {
    const c = new RedisStreamsClient({
      redisUrl: TEST_REDIS_URL,
      keyPrefix: prefix.prefix,
      timeoutMs: 100,
      requestRetentionMs: retentionMs,
    });
    clients.push(c);
    await c.connect();
    return c;
  };
  const timedOut = (c: RedisStreamsClient, n: number) =>
    lastValueFrom(c.send(PATTERN, { n })).then(
      () => 'answered',
      (err: { code?: string }) => err.code,
    );

  it('drops requests older than the retention from the stream as new ones come', async () => {
    const c = await client(300);
    const key = requestStreamKey(prefix.prefix, PATTERN);
    expect(await Promise.all([1, 2, 3, 4, 5].map((n) => timedOut(c, n)))).toEqual(
      Array(5).fill('TIMEOUT'),
    );
    expect(await redis.xlen(key)).toBe(5);
    await sleep(400); // past the retention: every one of them is past its deadline too
    expect(await timedOut(c, 6)).toBe('TIMEOUT');
    const left = await redis.xrange(key, '-', '+');
    expect(left.map(([, fields]) => fields[fields.indexOf('data') + 1])).toEqual(['{"n":6}']);
  });

  it('keeps them by default at least an hour, and twice the longest execution', () => {
    const defaults = new RedisStreamsClient({ redisUrl: TEST_REDIS_URL, keyPrefix: 'x:' });
    const long = new RedisStreamsClient({
      redisUrl: TEST_REDIS_URL,
      keyPrefix: 'x:',
      timeoutMs: 1000,
      maxExecutionMs: 3 * 3_600_000,
    });
    expect([defaults.requestRetentionMs, long.requestRetentionMs]).toEqual([
      3_600_000,
      6 * 3_600_000,
    ]);
  });
});
