import Redis from 'ioredis';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { RedisSessionStore } from '../redis/redis-session.store';
import { runSessionStoreContract } from '../session-store.contract';
import { TieredSessionStore } from './tiered-session.store';

runSessionStoreContract('tiered (LRU → Redis → MySQL)', async () => {
  const db = await createTestDatabase();
  const prefix = createTestPrefix();
  const store = new TieredSessionStore(
    new MysqlSessionStore(await openSessionDataSource({ url: db.url })),
    new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix, { authoritative: false }),
    { ttlFor: ttlRules(DEFAULT_TTL), lruTtlMs: 0 },
  );
  return {
    store,
    cleanup: async () => {
      await store.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    },
  };
});
