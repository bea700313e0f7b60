import { createConnection } from 'mysql2/promise';
import { TEST_MYSQL_URL } from '@loom/testing';
import { startInProcessOrchestrator } from './in-process.support';

/**
 * The e2e suites' orchestrator runs on the MariaDB every suite, helper and CI run shares. One that
 * fails to start (a setting refused, a store out of reach) leaves the suite nothing to close:
 * the database made for it (`loom_<name>_<pid>_…`, named after this process) must go with it.
 */
describe('an in-process orchestrator that fails to start', () => {
  it('leaves no database behind', async () => {
    await expect(
      startInProcessOrchestrator('inproc_fail', { env: { PORT: 'not-a-port' } }),
    ).rejects.toThrow(/PORT/);
    const conn = await createConnection(TEST_MYSQL_URL);
    try {
      const [rows] = await conn.query(
        `SHOW DATABASES LIKE 'loom\\_inproc\\_fail\\_${process.pid}\\_%'`,
      );
      expect(rows).toEqual([]);
    } finally {
      await conn.end();
    }
  });
});
