import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { RedisThrottlerStorage } from './redis-throttler.storage';

describe('RedisThrottlerStorage (real Redis)', () => {
  let redis: Redis;
  let prefix: Awaited<ReturnType<typeof createTestPrefix>>;

  beforeAll(async () => {
    redis = new Redis(TEST_REDIS_URL);
    prefix = createTestPrefix('loomthr');
  });
  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  it('counts hits in a window, blocks past the limit and says for how long', async () => {
    const s = new RedisThrottlerStorage(redis, prefix.prefix);
    const hits = [];
    for (let i = 0; i < 4; i++)
      hits.push(await s.increment('tenant:a', 60_000, 3, 30_000, 'default'));
    expect(hits.map((h) => [h.totalHits, h.isBlocked])).toEqual([
      [1, false],
      [2, false],
      [3, false],
      [4, true],
    ]);
    expect(hits[0].timeToExpire).toBe(60);
    expect(hits[3].timeToBlockExpire).toBe(30);
    // while blocked nothing is counted; another key is untouched
    expect((await s.increment('tenant:a', 60_000, 3, 30_000, 'default')).totalHits).toBe(4);
    expect((await s.increment('tenant:b', 60_000, 3, 30_000, 'default')).totalHits).toBe(1);
  });

  it('is atomic under concurrency: exactly `limit` of 50 parallel hits pass', async () => {
    const s = new RedisThrottlerStorage(redis, prefix.prefix);
    const res = await Promise.all(
      Array.from({ length: 50 }, () => s.increment('tenant:c', 60_000, 20, 60_000, 'default')),
    );
    expect(res.filter((r) => !r.isBlocked)).toHaveLength(20);
  });

  it('starts a new window after the old one expires', async () => {
    const s = new RedisThrottlerStorage(redis, prefix.prefix);
    expect((await s.increment('tenant:d', 150, 1, 0, 'default')).isBlocked).toBe(false);
    expect((await s.increment('tenant:d', 150, 1, 0, 'default')).isBlocked).toBe(true);
    await new Promise((r) => setTimeout(r, 250));
    expect((await s.increment('tenant:d', 150, 1, 0, 'default')).totalHits).toBe(1);
  });

  it('lets requests through when Redis fails, and reports it', async () => {
    const dead = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    const errors: unknown[] = [];
    const s = new RedisThrottlerStorage(dead, prefix.prefix, (e) => errors.push(e));
    const r = await s.increment('tenant:e', 60_000, 1, 0, 'default');
    expect(r.isBlocked).toBe(false);
    expect(errors).toHaveLength(1);
    dead.disconnect();
  });
});
