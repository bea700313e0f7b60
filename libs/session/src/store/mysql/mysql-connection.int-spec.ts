import { mkdtemp, rm } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import { createConnection } from 'mysql2/promise';
import {
  createTestCertificates,
  createTestDatabase,
  PrivateMariaDb,
  TestCertificates,
} from '@loom/testing';
import { openSessionDataSource } from './data-source';
import { MysqlSessionStore } from './mysql-session.store';

describe('MYSQL_URL options on the shared server (no TLS)', () => {
  it('asks for TLS it does not offer: a startup error saying so', async () => {
    const db = await createTestDatabase();
    try {
      for (const url of [`${db.url}?ssl=true`, `${db.url}?ssl={"rejectUnauthorized":false}`])
        await expect(openSessionDataSource({ url, migrationsRun: false })).rejects.toThrow(
          "MySQL at 127.0.0.1:3306 does not offer TLS, which MYSQL_URL's ssl option or MYSQL_SSL_CA asks for",
        );
    } finally {
      await db.drop();
    }
  });

  it('refuses an option that would break Loom, naming it, before connecting', async () => {
    await expect(
      openSessionDataSource({
        url: 'mysql://root@127.0.0.1:3306/loom_never?multipleStatements=true',
      }),
    ).rejects.toThrow(
      'MYSQL_URL option multipleStatements is not allowed: Loom sends one statement per query',
    );
  });

  it('ssl=false connects as without it', async () => {
    const db = await createTestDatabase();
    const store = new MysqlSessionStore(
      await openSessionDataSource({ url: `${db.url}?ssl=false` }),
    );
    try {
      await store.save({ tenantId: 't' }, 'c_conversation1', 'conversation', { a: 1 });
      expect(await store.get({ tenantId: 't' }, 'c_conversation1', 'conversation')).toEqual({
        a: 1,
      });
    } finally {
      await store.close();
      await db.drop();
    }
  });
});

/**
 * A private MariaDB with TLS (a throwaway CA) and a session time zone of +05:00 by default, whose
 * user `loom_tls` may connect over TLS only: every connection a data source opens (the database
 * check, the pool, the migration lock) must then use MYSQL_URL's options.
 */
describe('a TLS server whose default time zone is not UTC', () => {
  let dir: string;
  let certs: TestCertificates;
  let server: PrivateMariaDb;
  const url = (db: string, query = '') =>
    `mysql://loom_tls:tls-only@127.0.0.1:${server.port}/${db}${query}`;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'loom-tls-'));
    certs = await createTestCertificates(dir);
    server = await PrivateMariaDb.start([
      `--ssl-ca=${certs.ca}`,
      `--ssl-cert=${certs.cert}`,
      `--ssl-key=${certs.key}`,
      '--default-time-zone=+05:00',
    ]);
    const root = await createConnection({ uri: server.url });
    await root.query("CREATE USER loom_tls@'%' IDENTIFIED BY 'tls-only' REQUIRE SSL");
    await root.query("GRANT ALL ON *.* TO loom_tls@'%'");
    await root.end();
  }, 60_000);
  afterAll(async () => {
    await server?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('without its CA, the certificate is refused, saying what to set', async () => {
    await expect(
      openSessionDataSource({ url: url('loom_nocert', '?ssl=true'), migrationsRun: false }),
    ).rejects.toThrow(
      `MySQL at 127.0.0.1:${server.port}: TLS failed (self-signed certificate in certificate chain); MYSQL_SSL_CA names the CA that signed the server's certificate`,
    );
  });

  it('with MYSQL_SSL_CA every connection is TLS, in UTC, and rows carry UTC times', async () => {
    const dataSource = await openSessionDataSource({
      url: url('loom_tls_db', '?ssl={"minVersion":"TLSv1.2"}'),
      sslCaFile: certs.ca,
      poolSize: 3,
    });
    const store = new MysqlSessionStore(dataSource);
    try {
      // The database was created and migrated (its lock connection is TLS too: no other may log in).
      const applied: { name: string }[] = await dataSource.query(
        'SELECT name FROM loom_migrations',
      );
      expect(applied).toHaveLength(2);
      // Three connections at once: every one the pool holds is TLS and in UTC.
      const sessions = await Promise.all(
        [1, 2, 3].map(() =>
          dataSource.query(
            "SELECT CONNECTION_ID() AS id, @@session.time_zone AS tz, VARIABLE_VALUE <> '' AS tls " +
              "FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher' AND SLEEP(0.2) = 0",
          ),
        ),
      );
      expect(new Set(sessions.map(([s]) => s.id)).size).toBe(3);
      expect(sessions.map(([s]) => [s.tz, Number(s.tls)])).toEqual([
        ['+00:00', 1],
        ['+00:00', 1],
        ['+00:00', 1],
      ]);

      const scope = { tenantId: 't' };
      const expiresAt = new Date(Date.now() + 3_600_000);
      const before = Date.now();
      await store.save(scope, 'c_conversation1', 'conversation', { a: 1 }, { expiresAt });
      await store.save(scope, 'c_conversation1', 'conversation', { a: 2 }, { expiresAt });
      const after = Date.now();
      // UNIX_TIMESTAMP of a TIMESTAMP column is the instant, whatever the reader's zone; the
      // columns themselves are read as the driver reads them (the listing's updated_at).
      const [row] = await dataSource.query(
        'SELECT UNIX_TIMESTAMP(created_at) * 1000 AS created, UNIX_TIMESTAMP(updated_at) * 1000 AS updated, ' +
          'updated_at, UNIX_TIMESTAMP(expires_at) * 1000 AS expires, expires_at > NOW(3) AS live ' +
          'FROM loom_session_state',
      );
      for (const at of [Number(row.created), Number(row.updated), row.updated_at.getTime()]) {
        expect(at).toBeGreaterThanOrEqual(before - 1000);
        expect(at).toBeLessThanOrEqual(after + 1000);
      }
      expect(Number(row.expires)).toBe(expiresAt.getTime());
      expect(Number(row.live)).toBe(1);
      expect(await store.sweepExpired(new Date(expiresAt.getTime() - 1))).toBe(0);
      expect(await store.sweepExpired(new Date(expiresAt.getTime() + 1))).toBe(1);
    } finally {
      await store.close();
    }
  });
});
