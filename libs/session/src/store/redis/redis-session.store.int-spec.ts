import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { runSessionStoreContract } from '../session-store.contract';
import { RedisSessionStore } from './redis-session.store';

runSessionStoreContract('redis', async () => {
  const prefix = createTestPrefix();
  const store = new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix);
  return {
    store,
    cleanup: async () => {
      await store.close();
      await prefix.cleanup();
    },
  };
});
