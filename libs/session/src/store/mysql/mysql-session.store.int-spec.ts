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

describe('mysql store: deleting a long session', () => {
  it('deletes it in bounded statements, its list items first, its single values last', async () => {
    const db = await createTestDatabase();
    const store = new MysqlSessionStore(await openSessionDataSource({ url: db.url }), {
      deleteBatch: 10,
    });
    try {
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
      // 25 items in batches of 10 (the last one short), then the single values in one statement.
      expect(deletes).toHaveLength(4);
      expect(deletes.slice(0, 3).every((q) => /item_index > 0 .*LIMIT 10$/.test(q))).toBe(true);
      expect(deletes[3]).toMatch(/item_index = 0/);
      expect(await store.listSessionKeys(a, sid)).toEqual([]);
      expect(await store.exists(a, sid)).toBe(false);
    } finally {
      await store.close();
      await db.drop();
    }
  });
});
