import { createTestDatabase } from '@loom/testing';
import { newId } from '../../ids';
import { runSessionStoreContract } from '../session-store.contract';
import { openSessionDataSource } from './data-source';
import { MysqlSessionStore } from './mysql-session.store';

runSessionStoreContract('mysql', async () => {
  const db = await createTestDatabase();
  const store = new MysqlSessionStore(await openSessionDataSource({ url: db.url }));
  return {
    store,
    cleanup: async () => {
      await store.close();
      await db.drop();
    },
  };
});

/** A store of its own database that deletes list items 10 at a time, for `fn`, then dropped. */
async function withSmallBatchStore(fn: (store: MysqlSessionStore) => Promise<void>) {
  const db = await createTestDatabase();
  const store = new MysqlSessionStore(await openSessionDataSource({ url: db.url }), {
    deleteBatch: 10,
  });
  try {
    await fn(store);
  } finally {
    await store.close();
    await db.drop();
  }
}

describe('mysql store: deleting a long session', () => {
  it('deletes it in bounded statements, its `conversation` row last', async () => {
    await withSmallBatchStore(async (store) => {
      const a = { tenantId: 'tenant-a' };
      const sid = newId('c');
      await store.save(a, sid, 'conversation', { title: 'long' });
      for (let n = 1; n <= 25; n++) await store.append(a, sid, 'messages', { n });
      const query = jest.spyOn(
        (store as unknown as { db: { query: (sql: string) => unknown } }).db,
        'query',
      );
      await store.delete(a, sid);
      const deletes = query.mock.calls.map(([sql]) => String(sql)).filter((q) => /^DELETE/.test(q));
      query.mockRestore();
      // The single values but `conversation`, then 25 items in batches of 10 (the last one
      // short), then the `conversation` row.
      expect(deletes).toHaveLength(5);
      expect(deletes[0]).toMatch(/item_index = 0 AND state_key NOT IN/);
      expect(deletes.slice(1, 4).every((q) => /item_index > 0 .*LIMIT 10$/.test(q))).toBe(true);
      expect(deletes[4]).toMatch(/item_index = 0/);
      expect(await store.listSessionKeys(a, sid)).toEqual([]);
      expect(await store.exists(a, sid)).toBe(false);
    });
  });
});

describe('mysql store: an execution writing while its conversation is deleted', () => {
  it('leaves nothing behind, whichever statement of the deletion its write follows', async () => {
    await withSmallBatchStore(async (store) => {
      const a = { tenantId: 'tenant-a' };
      const sid = newId('c');
      const taskKey = 'task:t_deleting1';
      const execution = { taskKey, agentSessionId: 'a_deleting1' };
      await store.save(a, sid, 'conversation', { title: 'deleted while an agent runs' });
      await store.save(a, sid, taskKey, { status: 'RUNNING', executions: [] });
      for (let n = 1; n <= 5; n++) await store.append(a, sid, `${taskKey}:shared`, { n });
      // An execution of the conversation's running task (its orchestrator died) writes a
      // shared key after each statement of the deletion.
      const dataSource = (store as unknown as { db: { query: (...a: unknown[]) => unknown } }).db;
      const query = dataSource.query.bind(dataSource);
      const outcomes: string[] = [];
      const spy = jest.spyOn(dataSource, 'query').mockImplementation(async (...args) => {
        const res = await query(...args);
        if (/^DELETE/.test(String(args[0])))
          outcomes.push(
            await store.append(a, sid, `${taskKey}:shared`, { late: true }, { execution }).then(
              () => 'written',
              (err: { code?: string }) => String(err.code),
            ),
          );
        return res;
      });
      await store.delete(a, sid);
      spy.mockRestore();
      expect(outcomes.length).toBeGreaterThan(0);
      expect(await store.listSessionKeys(a, sid)).toEqual([]);
      expect(await store.getList(a, sid, `${taskKey}:shared`)).toEqual([]);
    });
  });
});
