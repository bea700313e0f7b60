import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';
import {
  createTestDatabase,
  createTestPrefix,
  FreezableTcpProxy,
  TEST_REDIS_URL,
} from '@loom/testing';
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

  /** 'started' (closed again at once), or why the start failed. */
  const start = (options: Parameters<typeof createSessionInfra>[0]) =>
    createSessionInfra(options).then(
      async (infra) => (await infra.close(), 'started'),
      (err: Error) => err.message,
    );

  it('refuses an app on another database than its deployment (same Redis and prefix), naming both', async () => {
    const [one, other] = [
      await createTestDatabase('loom_dbid_one'),
      await createTestDatabase('loom_dbid_other'),
    ];
    const prefix = createTestPrefix('loomdbid');
    const redis = new Redis(TEST_REDIS_URL);
    try {
      expect(await start({ mysqlUrl: one.url, keyPrefix: prefix.prefix })).toBe('started');
      // An agent given another MYSQL_URL would answer every turn "task not found".
      expect(await start({ mysqlUrl: other.url, keyPrefix: prefix.prefix })).toMatch(
        new RegExp(
          `the deployment with LOOM_KEY_PREFIX="${prefix.prefix}" uses MySQL database ${one.name} at 127\\.0\\.0\\.1:\\d+, ` +
            `not ${other.name} at 127\\.0\\.0\\.1:\\d+`,
        ),
      );
      // So is an operator tool; the deployment's own apps start as before.
      expect(
        await start({ mysqlUrl: other.url, keyPrefix: prefix.prefix, databaseClaim: 'check' }),
      ).toContain('uses MySQL database');
      expect(await start({ mysqlUrl: one.url, keyPrefix: prefix.prefix })).toBe('started');
      // A deliberate move to a new database: the record in Redis deleted, as documented.
      await redis.del(`${prefix.prefix}deployment:database`);
      expect(await start({ mysqlUrl: other.url, keyPrefix: prefix.prefix })).toBe('started');
      expect(await start({ mysqlUrl: one.url, keyPrefix: prefix.prefix })).toContain(
        `uses MySQL database ${other.name}`,
      );
    } finally {
      redis.disconnect();
      await Promise.all([one.drop(), other.drop(), prefix.cleanup()]);
    }
  });

  it('knows a copy of the database (a dump restored elsewhere, a replica promoted) as the same', async () => {
    const [one, copy] = [
      await createTestDatabase('loom_dbid_orig'),
      await createTestDatabase('loom_dbid_copy'),
    ];
    const prefix = createTestPrefix('loomdbidcopy');
    const admin = await createConnection(one.url);
    try {
      expect(await start({ mysqlUrl: one.url, keyPrefix: prefix.prefix })).toBe('started');
      for (const table of ['loom_session_state', 'loom_migrations']) {
        await admin.query(`CREATE TABLE \`${copy.name}\`.${table} LIKE \`${one.name}\`.${table}`);
        await admin.query(
          `INSERT INTO \`${copy.name}\`.${table} SELECT * FROM \`${one.name}\`.${table}`,
        );
      }
      expect(await start({ mysqlUrl: copy.url, keyPrefix: prefix.prefix })).toBe('started');
    } finally {
      await admin.end();
      await Promise.all([one.drop(), copy.drop(), prefix.cleanup()]);
    }
  });
});

describe('createSessionInfra: a MySQL that goes down during the start', () => {
  it('starts once it is back, though its first connection went through', async () => {
    const db = await createTestDatabase('loom_start_down');
    const prefix = createTestPrefix('loomstartdown');
    const url = new URL(db.url);
    const proxy = await FreezableTcpProxy.start({ host: url.hostname, port: Number(url.port) });
    url.port = String(proxy.port);
    try {
      // The database exists (the first connection), then the server is gone for the next three:
      // the pool, the start's next steps. It used to fail the start ("ECONNRESET"), and an agent
      // started beside a MySQL that was restarting exited.
      proxy.refuseAfter(1, 3);
      const infra = await createSessionInfra({
        mysqlUrl: url.toString(),
        keyPrefix: prefix.prefix,
      });
      try {
        expect(proxy.accepted).toBeGreaterThan(4);
        const scope = { tenantId: 'tenant-a' };
        await infra.store.save(scope, 'c_startdown1', 'conversation', { title: 'x' });
        expect(await infra.store.get(scope, 'c_startdown1', 'conversation')).toEqual({
          title: 'x',
        });
      } finally {
        await infra.close();
      }
    } finally {
      await proxy.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });

  it('gives up after DB_START_TIMEOUT_MS, saying MySQL is unavailable', async () => {
    const db = await createTestDatabase('loom_start_gone');
    const prefix = createTestPrefix('loomstartgone');
    const url = new URL(db.url);
    const proxy = await FreezableTcpProxy.start({ host: url.hostname, port: Number(url.port) });
    url.port = String(proxy.port);
    try {
      proxy.refuseAfter(1, 1_000_000);
      const started = Date.now();
      await expect(
        createSessionInfra({
          mysqlUrl: url.toString(),
          keyPrefix: prefix.prefix,
          mysqlStartTimeoutMs: 1500,
        }),
      ).rejects.toThrow(/ECONNRESET|refused every connection|connection lost/i);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1500);
    } finally {
      await proxy.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });
});
