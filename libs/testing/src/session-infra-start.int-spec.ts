import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';
import { TEST_MYSQL_URL, TEST_REDIS_URL } from './infra';
import { createTestSessionInfra } from './session-infra';

/**
 * createTestSessionInfra makes a database (`loom_tsifail_<pid>_…`, named after this process)
 * and a key prefix on the servers every suite shares before it starts the infrastructure. A
 * start that fails halfway leaves the suite nothing to clean up with: what was made must go here.
 */
describe('a createTestSessionInfra whose start fails', () => {
  it('leaves no database and no keys behind', async () => {
    // A Redis database number the server does not have: refused once MySQL is set up.
    await expect(
      createTestSessionInfra('loom_tsifail', { url: `${TEST_REDIS_URL}/99` }),
    ).rejects.toThrow(/DB index/);

    const conn = await createConnection(TEST_MYSQL_URL);
    try {
      const [rows] = await conn.query(`SHOW DATABASES LIKE 'loom\\_tsifail\\_${process.pid}\\_%'`);
      expect(rows).toEqual([]);
    } finally {
      await conn.end();
    }
    const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
    try {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const [next, found] = await redis.scan(cursor, 'MATCH', `loomtsifail_${process.pid}_*`);
        cursor = next;
        keys.push(...found);
      } while (cursor !== '0');
      expect(keys).toEqual([]);
    } finally {
      await redis.quit();
    }
  });
});
