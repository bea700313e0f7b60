import { DataSource } from 'typeorm';
import { createTestDatabase } from '@loom/testing';
import { SESSION_MIGRATIONS } from '../../migrations';
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

  it('upgrades a table of the first schema to byte-wise keys, reporting sessions two cases of a tenant wrote', async () => {
    const db = await createTestDatabase();
    const first = new DataSource({
      type: 'mysql',
      url: db.url,
      migrations: SESSION_MIGRATIONS.slice(0, 1),
      migrationsTableName: 'loom_migrations',
    });
    await first.initialize();
    const warn = jest.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      await first.runMigrations();
      const insert =
        'INSERT INTO loom_session_state (session_id, state_key, item_index, tenant_id, state_data) VALUES (?, ?, ?, ?, ?)';
      await first.query(insert, ['c_session_mixed', 'messages', 1, 'acme', '"a"']);
      await first.query(insert, ['c_session_mixed', 'messages', 2, 'ACME', '"b"']);
      await first.query(insert, ['c_session_plain', 'conversation', 0, 'acme', '{}']);
      await first.destroy();

      const upgraded = await openSessionDataSource({ url: db.url });
      const cols: Array<{ COLUMN_NAME: string; COLLATION_NAME: string }> = await upgraded.query(
        'SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS ' +
          "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'loom_session_state' " +
          "AND COLUMN_NAME IN ('session_id', 'state_key', 'tenant_id', 'user_id') ORDER BY COLUMN_NAME",
      );
      expect(cols.map((c) => [c.COLUMN_NAME, c.COLLATION_NAME])).toEqual([
        ['session_id', 'utf8mb4_bin'],
        ['state_key', 'utf8mb4_bin'],
        ['tenant_id', 'utf8mb4_bin'],
        ['user_id', 'utf8mb4_bin'],
      ]);
      const said = warn.mock.calls
        .map((c) => String(c[0]))
        .filter((l) => l.includes('CaseSensitiveKeys'));
      expect(said).toEqual([
        expect.stringContaining('1 session(s) hold rows of tenants that differ only in case'),
      ]);
      const store = new MysqlSessionStore(upgraded);
      expect(await store.getList({ tenantId: 'acme' }, 'c_session_mixed', 'messages')).toEqual([
        { index: 1, value: 'a' },
      ]);
      await store.close();
    } finally {
      warn.mockRestore();
      if (first.isInitialized) await first.destroy();
      await db.drop();
    }
  });

  it('starts after a first start that was stopped between creating the table and recording it', async () => {
    const db = await createTestDatabase();
    // MySQL commits a CREATE TABLE by itself: a process killed (a restart, Ctrl-C, OOM) right
    // after it leaves the table without its row in loom_migrations.
    const first = new DataSource({
      type: 'mysql',
      url: db.url,
      migrations: SESSION_MIGRATIONS.slice(0, 1),
      migrationsTableName: 'loom_migrations',
    });
    await first.initialize();
    try {
      await first.runMigrations();
      await first.query('DELETE FROM loom_migrations');
      await first.destroy();
      const ds = await openSessionDataSource({ url: db.url });
      const rows: { name: string }[] = await ds.query('SELECT name FROM loom_migrations');
      expect(rows.map((r) => r.name)).toEqual([
        'CreateSessionState1763790000000',
        'CaseSensitiveKeys1795000000000',
      ]);
      await ds.destroy();
    } finally {
      if (first.isInitialized) await first.destroy();
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
