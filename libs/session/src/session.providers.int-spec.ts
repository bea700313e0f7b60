import { createTestDatabase, createTestPrefix } from '@loom/testing';
import { createSessionInfra } from './session.providers';

describe('createSessionInfra: one database, one deployment (real MySQL and Redis)', () => {
  it('refuses a database another key prefix claimed, and lets the same prefix back in', async () => {
    const db = await createTestDatabase('loom_claim');
    const [a, b] = [createTestPrefix('loomclaima'), createTestPrefix('loomclaimb')];
    try {
      const first = await createSessionInfra({ mysqlUrl: db.url, keyPrefix: a.prefix });
      await first.close();
      // Another deployment on the same database would see the first one's conversations.
      await expect(createSessionInfra({ mysqlUrl: db.url, keyPrefix: b.prefix })).rejects.toThrow(
        `the database of MYSQL_URL belongs to the deployment with LOOM_KEY_PREFIX=${JSON.stringify(a.prefix)}`,
      );
      // Replicas and restarts of the first deployment share it, also several at once.
      const again = await Promise.all(
        [1, 2, 3].map(() => createSessionInfra({ mysqlUrl: db.url, keyPrefix: a.prefix })),
      );
      await Promise.all(again.map((infra) => infra.close()));
    } finally {
      await Promise.all([db.drop(), a.cleanup(), b.cleanup()]);
    }
  });
});
