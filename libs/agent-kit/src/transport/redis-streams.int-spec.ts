import Redis from 'ioredis';
import { TEST_REDIS_URL } from '@loom/testing';
import { runTransportSuite } from './redis-streams.suite';

runTransportSuite({
  name: 'standalone',
  open: async () => {
    const redis = new Redis(TEST_REDIS_URL);
    return { target: { url: TEST_REDIS_URL }, redis, close: async () => void (await redis.quit()) };
  },
});
