import { createConnection } from 'mysql2/promise';
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

  it('lets an operator tool check the claim without ever making one', async () => {
    const db = await createTestDatabase('loom_claim_tool');
    const [tool, app] = [createTestPrefix('loomclaimtool'), createTestPrefix('loomclaimapp')];
    try {
      // A tool run with a wrong prefix on a database nobody claimed yet claims nothing.
      const check = { mysqlUrl: db.url, databaseClaim: 'check' as const };
      await (await createSessionInfra({ ...check, keyPrefix: tool.prefix })).close();
      await (await createSessionInfra({ mysqlUrl: db.url, keyPrefix: app.prefix })).close();
      // Once the deployment has claimed it, the same tool is refused.
      await expect(createSessionInfra({ ...check, keyPrefix: tool.prefix })).rejects.toThrow(
        `belongs to the deployment with LOOM_KEY_PREFIX=${JSON.stringify(app.prefix)}`,
      );
      await (await createSessionInfra({ ...check, keyPrefix: app.prefix })).close();
    } finally {
      await Promise.all([db.drop(), tool.cleanup(), app.cleanup()]);
    }
  });

  it('starts on a database not migrated yet (DB_MIGRATIONS_RUN=false), claiming nothing', async () => {
    const db = await createTestDatabase('loom_claim_bare');
    const prefix = createTestPrefix('loomclaimbare');
    try {
      const infra = await createSessionInfra({
        mysqlUrl: db.url,
        keyPrefix: prefix.prefix,
        migrationsRun: false,
      });
      await infra.close();
    } finally {
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });

  it('fails the start, rather than skip the check, while the claim cannot be read', async () => {
    const db = await createTestDatabase('loom_claim_busy');
    const [a, b] = [createTestPrefix('loomclaimbusya'), createTestPrefix('loomclaimbusyb')];
    const holder = await createConnection(db.url);
    try {
      await (await createSessionInfra({ mysqlUrl: db.url, keyPrefix: a.prefix })).close();
      // The claim row locked by another transaction: B's read of it times out (UNAVAILABLE).
      await holder.query('BEGIN');
      await holder.query(
        "SELECT * FROM loom_session_state WHERE session_id = '_sys_deployment' FOR UPDATE",
      );
      await expect(
        createSessionInfra({ mysqlUrl: db.url, keyPrefix: b.prefix, mysqlQueryTimeoutMs: 500 }),
      ).rejects.toMatchObject({ code: 'UNAVAILABLE' });
      await holder.query('ROLLBACK');
      await expect(createSessionInfra({ mysqlUrl: db.url, keyPrefix: b.prefix })).rejects.toThrow(
        'belongs to the deployment',
      );
    } finally {
      await holder.end();
      await Promise.all([db.drop(), a.cleanup(), b.cleanup()]);
    }
  });
});
