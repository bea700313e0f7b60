import { createTestDatabase } from '@loom/testing';
import { LoomErrorCode } from '../../errors/session-error';
import { openSessionDataSource } from './data-source';
import { MysqlSessionStore } from './mysql-session.store';

describe('openSessionDataSource', () => {
  it('migrates with a pool of one connection (DB_POOL_SIZE=1), and twice at once', async () => {
    const db = await createTestDatabase();
    try {
      const [a, b] = await Promise.all([
        openSessionDataSource({ url: db.url, poolSize: 1 }),
        openSessionDataSource({ url: db.url, poolSize: 1 }),
      ]);
      const rows: { name: string }[] = await a.query('SELECT name FROM loom_migrations');
      expect(rows.map((r) => r.name)).toEqual([
        'CreateSessionState1763790000000',
        'CaseSensitiveKeys1795000000000',
      ]);
      expect(await b.query('SELECT COUNT(*) AS n FROM loom_session_state')).toEqual([{ n: '0' }]);
      await Promise.all([a.destroy(), b.destroy()]);
    } finally {
      await db.drop();
    }
  });

  it('without migrations (DB_MIGRATIONS_RUN=false) the store answers UNAVAILABLE, saying what to run', async () => {
    const db = await createTestDatabase();
    const store = new MysqlSessionStore(
      await openSessionDataSource({ url: db.url, migrationsRun: false }),
    );
    try {
      await expect(
        store.get({ tenantId: 't' }, 'c_conversation1', 'conversation'),
      ).rejects.toMatchObject({
        code: LoomErrorCode.UNAVAILABLE,
        message: expect.stringContaining('npm run migration:run'),
      });
    } finally {
      await store.close();
      await db.drop();
    }
  });
});
