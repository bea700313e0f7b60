import { PrivateMariaDb } from '@loom/testing';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { newId } from '../../ids';
import { openSessionDataSource } from './data-source';
import { MysqlSessionStore } from './mysql-session.store';

/** More reads at once than the pool queues (1000 per pool): load, not a database out of reach. */
const READS = 1500;

/**
 * A MariaDB of this suite's own (it floods it) that answers all the while: the reads past the
 * pool's queue are refused as an overload worth retrying in a moment (Retry-After), never as
 * "the durable store is unavailable", which tells an operator MySQL is down.
 */
describe('mysql store: more reads at once than the pool queues', () => {
  const alice = { tenantId: 'tenant-a' };
  let db: PrivateMariaDb;
  let store: MysqlSessionStore;

  beforeAll(async () => {
    db = await PrivateMariaDb.start();
    store = new MysqlSessionStore(
      await openSessionDataSource({ url: `${db.url}/loom_overload_reads`, poolSize: 1 }),
      { queryTimeoutMs: 60_000 },
    );
  });
  afterAll(async () => {
    await store?.close();
    await db?.destroy();
  });

  it('refuses the reads past the queue as overloaded, with a retry hint', async () => {
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { v: 1 });
    const outcomes = await Promise.all(
      Array.from({ length: READS }, () =>
        store.get(alice, sid, 'conversation').then(
          () => 'answered',
          (err: unknown) => err,
        ),
      ),
    );
    const refused = outcomes.filter((o) => o !== 'answered');
    expect(refused.length).toBeGreaterThan(0);
    for (const err of refused) {
      expect(LoomError.is(err, LoomErrorCode.UNAVAILABLE)).toBe(true);
      expect((err as LoomError).message).toMatch(/overloaded/);
      expect((err as LoomError).details).toMatchObject({ retryAfterS: 1 });
    }
    // Once the load is gone, reads answer again.
    expect(await store.get(alice, sid, 'conversation')).toEqual({ v: 1 });
  });
});
