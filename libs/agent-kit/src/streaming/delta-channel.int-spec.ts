import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { DeltaChannel } from './delta-channel';

describe('DeltaChannel (real Redis)', () => {
  const { prefix, cleanup } = createTestPrefix('loomdelta');
  const redis = new Redis(TEST_REDIS_URL);
  afterAll(async () => {
    await cleanup();
    await redis.quit();
  });

  it('relays every delta in order, and deletes the stream once read to the end', async () => {
    const channel = new DeltaChannel(redis, prefix);
    const seen: string[] = [];
    const sub = channel.subscribe('c_delta_conv', 'a_delta_session', (t) => seen.push(t));
    for (const text of ['劳动', '合同', ' ok'])
      await channel.publish('c_delta_conv', 'a_delta_session', text);
    const key = `${prefix}deltas:{c_delta_conv}:a_delta_session`;
    expect(await redis.exists(key)).toBe(1);
    await sub.stop();
    expect(seen).toEqual(['劳动', '合同', ' ok']);
    // The reply text does not outlive the turn in Redis (a conversation deleted right after).
    expect(await redis.exists(key)).toBe(0);
  });
});
