import { setFlagsFromString } from 'v8';
import { runInNewContext } from 'vm';
import type { Pool, PoolConnection } from 'mysql2';
import { createTestDatabase } from '@loom/testing';
import { openSessionDataSource } from './data-source';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** A connection of the pool, opened now (the pool had none idle), then closed for good. */
function churn(pool: Pool): Promise<WeakRef<PoolConnection>> {
  return new Promise((resolve, reject) =>
    pool.getConnection((err, conn) => {
      if (err) return reject(err);
      conn.query('SELECT 1', (queryErr) => {
        if (queryErr) return reject(queryErr);
        const ref = new WeakRef(conn);
        conn.destroy();
        resolve(ref);
      });
    }),
  );
}

/**
 * A pool replaces the connections it loses (a server restart, a failover, a network blip, the
 * server's wait_timeout) for as long as the process runs: a connection gone is garbage, not kept.
 */
describe('openSessionDataSource: connections opened after the start', () => {
  it('keeps no reference to the connections the pool has closed', async () => {
    const db = await createTestDatabase();
    const ds = await openSessionDataSource({ url: db.url, poolSize: 2 });
    try {
      const pool = (ds.driver as unknown as { pool: Pool }).pool;
      const refs: WeakRef<PoolConnection>[] = [];
      for (let i = 0; i < 40; i++) refs.push(await churn(pool));
      // Destroyed sockets finish closing on later turns of the event loop.
      for (let round = 0; round < 5; round++) {
        await new Promise((r) => setTimeout(r, 50));
        gc();
      }
      const kept = refs.filter((ref) => ref.deref() !== undefined).length;
      expect(kept).toBeLessThanOrEqual(2);
    } finally {
      await ds.destroy();
      await db.drop();
    }
  });
});
