import { createTestDatabase } from '@loom/testing';
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
