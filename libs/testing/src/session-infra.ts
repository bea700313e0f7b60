import { createSessionInfra, DEFAULT_TTL, RedisTarget, SessionInfra } from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from './infra';

/**
 * The distributed session infrastructure (tiered store over real MySQL and Redis) on a database
 * and key prefix of one suite's own; `cleanup()` closes it and drops both (even when the close
 * fails). A start that fails drops them itself: the suite has nothing to clean up with. `redis`:
 * another Redis than the shared one (a suite's own cluster, whose keys go when it stops).
 */
export async function createTestSessionInfra(
  name = 'loom_test',
  redis: RedisTarget = { url: TEST_REDIS_URL },
): Promise<{ infra: SessionInfra; mysqlUrl: string; cleanup: () => Promise<void> }> {
  const db = await createTestDatabase(name);
  const prefix = createTestPrefix(name.replace(/_/g, ''));
  const dropBoth = async () => {
    await Promise.all([db.drop(), prefix.cleanup()]);
  };
  let infra: SessionInfra;
  try {
    infra = await createSessionInfra({
      profile: 'distributed',
      mysqlUrl: db.url,
      redisUrl: redis.url,
      redisClusterNodes: redis.clusterNodes ? [...redis.clusterNodes] : undefined,
      redisClusterNatMap: redis.natMap,
      keyPrefix: prefix.prefix,
      migrationsRun: true,
      dataDir: '',
      ttl: DEFAULT_TTL,
      idleExpiryDays: 30,
      lockTtlMs: 30_000,
      lockWaitMs: 200,
      lruMax: 1000,
      lruTtlMs: 1000,
      redisCallTimeoutMs: 250,
    });
  } catch (err) {
    await dropBoth().catch(() => undefined);
    throw err;
  }
  return {
    infra,
    mysqlUrl: db.url,
    cleanup: async () => {
      try {
        await infra.close();
      } finally {
        await dropBoth();
      }
    },
  };
}
