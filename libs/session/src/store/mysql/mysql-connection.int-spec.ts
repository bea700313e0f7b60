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
 * A private MariaDB with TLS (a throwaway CA), whose user `loom_tls` may connect over TLS only:
 * every connection a data source opens (the database check, the pool, the migration lock) must
 * then use the options of MYSQL_URL.
 */
describe('a server that requires TLS', () => {
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

  it('with MYSQL_SSL_CA every connection is TLS', async () => {
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
      // Three connections at once: every one the pool holds is TLS.
      const sessions = await Promise.all(
        [1, 2, 3].map(() =>
          dataSource.query(
            "SELECT CONNECTION_ID() AS id, VARIABLE_VALUE <> '' AS tls " +
              "FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher' AND SLEEP(0.2) = 0",
          ),
        ),
      );
      expect(new Set(sessions.map(([s]) => s.id)).size).toBe(3);
      expect(sessions.map(([s]) => Number(s.tls))).toEqual([1, 1, 1]);
      await store.save({ tenantId: 't' }, 'c_conversation1', 'conversation', { a: 1 });
      expect(await store.get({ tenantId: 't' }, 'c_conversation1', 'conversation')).toEqual({
        a: 1,
      });
    } finally {
      await store.close();
    }
  });
});
