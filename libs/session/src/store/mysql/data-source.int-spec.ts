import { createTestDatabase } from '@loom/testing';
import { openSessionDataSource } from './data-source';

describe('openSessionDataSource', () => {
  it('migrates with a pool of one connection (DB_POOL_SIZE=1), and twice at once', async () => {
    const db = await createTestDatabase();
    try {
      const [a, b] = await Promise.all([
        openSessionDataSource({ url: db.url, poolSize: 1 }),
        openSessionDataSource({ url: db.url, poolSize: 1 }),
      ]);
      const rows: { name: string }[] = await a.query('SELECT name FROM loom_migrations');
      expect(rows.map((r) => r.name)).toEqual(['CreateSessionState1763790000000']);
      expect(await b.query('SELECT COUNT(*) AS n FROM loom_session_state')).toEqual([{ n: '0' }]);
      await Promise.all([a.destroy(), b.destroy()]);
    } finally {
      await db.drop();
    }
  });
});
