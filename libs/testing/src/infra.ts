import { randomBytes } from 'crypto';
import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';

/** Where the test servers are; CI and developers run them on the standard ports. */
export const TEST_MYSQL_URL = process.env.TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A name no other suite running beside this one uses. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** A throwaway database for one suite: created now, dropped by `drop()`. */
export async function createTestDatabase(
  prefix = 'loom_test',
): Promise<{ name: string; url: string; drop: () => Promise<void> }> {
  const name = uniqueName(prefix);
  const admin = await createConnection(TEST_MYSQL_URL);
  try {
    await admin.query(
      `CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`,
    );
  } finally {
    await admin.end();
  }
  return {
    name,
    url: `${TEST_MYSQL_URL.replace(/\/$/, '')}/${name}`,
    drop: async () => {
      const conn = await createConnection(TEST_MYSQL_URL);
      try {
        await conn.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await conn.end();
      }
    },
  };
}

/** A key prefix of its own for one suite; `cleanup()` deletes every key under it. */
export function createTestPrefix(prefix = 'loomtest'): {
  prefix: string;
  cleanup: () => Promise<void>;
} {
  const keyPrefix = `${uniqueName(prefix)}:`;
  return { prefix: keyPrefix, cleanup: () => deleteKeysUnder(keyPrefix) };
}

/**
 * Deletes every key under `keyPrefix` on the shared test Redis (SCAN, never KEYS). A prefix that
 * is empty or a bare `*` is refused: it would match other people's keys.
 */
export async function deleteKeysUnder(keyPrefix: string): Promise<void> {
  if (!keyPrefix.replace(/\*/g, ''))
    throw new Error(`refusing to delete keys under '${keyPrefix}'`);
  const redis = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    // QUIT: the server closes the socket; disconnect() would arm ioredis's 2 s end timer.
    if (redis.status === 'ready') await redis.quit().catch(() => redis.disconnect());
    else redis.disconnect();
  }
}
