import { createHash } from 'crypto';
import { AddressInfo, connect, createServer, Socket } from 'net';
import { createConnection } from 'mysql2/promise';
import { DataSource } from 'typeorm';
import { createTestDatabase, PrivateMariaDb, TEST_MYSQL_URL } from '@loom/testing';
import { SESSION_MIGRATIONS } from '../../migrations';
import { openSessionDataSource } from './data-source';

/** What `p` came to, or 'still waiting' if it had not settled after `ms` (a hang, not a speed). */
function settled(p: Promise<unknown>, ms: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(
      () => 'opened',
      (err: Error) => `failed: ${err.message}`,
    ),
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still waiting'), ms))),
  ]).finally(() => clearTimeout(timer));
}

/** Start statements MySQL leaves waiting fail the start after DB_START_TIMEOUT_MS, saying so. */
describe('openSessionDataSource: a start MySQL leaves waiting', () => {
  it('gives up on a migration another session holds the table for, naming the step', async () => {
    const db = await createTestDatabase();
    // The first schema, then a session that reads the table in an open transaction: its
    // metadata lock keeps the next migration's ALTER TABLE waiting.
    const first = new DataSource({
      type: 'mysql',
      url: db.url,
      migrations: SESSION_MIGRATIONS.slice(0, 1),
      migrationsTableName: 'loom_migrations',
    });
    await first.initialize();
    await first.runMigrations();
    await first.destroy();
    const holder = await createConnection(db.url);
    try {
      await holder.query('START TRANSACTION');
      await holder.query('SELECT * FROM loom_session_state');
      const start = openSessionDataSource({ url: db.url, startTimeoutMs: 1500 });
      start.then((ds) => ds.destroy()).catch(() => undefined);
      expect(await settled(start, 30_000)).toMatch(
        /^failed: MySQL at 127\.0\.0\.1:\d+: a migration waited 2 s \(DB_START_TIMEOUT_MS\) for a table another session holds/,
      );
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
      await db.drop();
    }
  });

  it('a co-starter waits for a migration that outlasts its time-out while the migrating process lives', async () => {
    const db = await createTestDatabase();
    // Another process migrating a large table: it holds the migration lock, longer than the
    // co-starter's DB_START_TIMEOUT_MS, and answers all along.
    const name = `loom_migrations:${createHash('sha1').update(db.name).digest('hex')}`;
    const holder = await createConnection(db.url);
    try {
      await holder.query('SELECT GET_LOCK(?, 0)', [name]);
      // Each step of the start (connecting, opening the pool, each migration) has this time-out
      // and must succeed: 2 s, not 1 s, so a loaded machine's stalls do not fail one; the lock
      // is still held for twice as long.
      const start = openSessionDataSource({ url: db.url, startTimeoutMs: 2000 });
      let done = false;
      start.then(
        () => (done = true),
        () => (done = true),
      );
      for (let i = 0; i < 8 && !done; i++) {
        await new Promise((r) => setTimeout(r, 500));
        await holder.query('SELECT 1');
      }
      await holder.query('SELECT RELEASE_LOCK(?)', [name]);
      const outcome = await settled(start, 30_000);
      expect(outcome).toBe('opened');
      const ds = await start;
      expect(await ds.query('SELECT COUNT(*) AS n FROM loom_migrations')).toEqual([{ n: '2' }]);
      await ds.destroy();
    } finally {
      await holder.end();
      await db.drop();
    }
  });

  it('closes the pool that opens after the start gave up on opening it', async () => {
    // A port in front of the shared server: the first connection (creating the database) goes
    // through; the pool's are held until the start has given up, then let through.
    const db = await createTestDatabase();
    const target = new URL(TEST_MYSQL_URL);
    const open = new Set<Socket>();
    const held: (() => void)[] = [];
    const proxy = createServer((client) => {
      open.add(client);
      client.on('close', () => open.delete(client)).on('error', () => undefined);
      const pass = () => {
        const upstream = connect(Number(target.port || 3306), target.hostname);
        upstream.on('error', () => client.destroy()).on('close', () => client.destroy());
        client.on('close', () => upstream.destroy());
        client.pipe(upstream).pipe(client);
      };
      if (first) pass();
      else held.push(pass);
      first = false;
    });
    let first = true;
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const { port } = proxy.address() as AddressInfo;
    try {
      const start = openSessionDataSource({
        url: `mysql://root@127.0.0.1:${port}/${db.name}`,
        startTimeoutMs: 1000,
        connectTimeoutMs: 30_000,
        migrationsRun: false,
      });
      start.then((ds) => ds.destroy()).catch(() => undefined);
      expect(await settled(start, 30_000)).toMatch(/while opening the pool/);
      held.splice(0).forEach((pass) => pass());
      // The late pool connection is closed, not left open in a data source nobody holds.
      for (let i = 0; i < 200 && open.size; i++) await new Promise((r) => setTimeout(r, 100));
      expect(open.size).toBe(0);
    } finally {
      open.forEach((socket) => socket.destroy());
      await new Promise((resolve) => proxy.close(resolve));
      await db.drop();
    }
  });

  describe('on a server of its own', () => {
    let server: PrivateMariaDb;
    beforeAll(async () => {
      server = await PrivateMariaDb.start();
    });
    afterAll(async () => {
      await server?.destroy();
    });

    it('gives up on creating the database while the server blocks it', async () => {
      // A global read lock (private server only): CREATE DATABASE waits for it, as for a
      // server that accepted the connection and then stalled.
      const holder = await createConnection(server.url);
      try {
        await holder.query('FLUSH TABLES WITH READ LOCK');
        const start = openSessionDataSource({ url: `${server.url}/loom`, startTimeoutMs: 1500 });
        start.then((ds) => ds.destroy()).catch(() => undefined);
        expect(await settled(start, 30_000)).toMatch(
          /^failed: MySQL at 127\.0\.0\.1:\d+ did not answer within 1500 ms \(DB_START_TIMEOUT_MS\) while creating the database/,
        );
      } finally {
        await holder.query('UNLOCK TABLES').catch(() => undefined);
        await holder.end();
      }
    });

    it('gives up on a server that stopped answering (SIGSTOP) after the connection', async () => {
      // The migration lock's connection is open; the server then stops answering.
      const start = openSessionDataSource({ url: `${server.url}/paused`, startTimeoutMs: 1500 });
      start.then((ds) => ds.destroy()).catch(() => undefined);
      server.pause();
      try {
        expect(await settled(start, 30_000)).toMatch(
          /^failed: MySQL at 127\.0\.0\.1:\d+ did not answer within 1500 ms \(DB_START_TIMEOUT_MS\)/,
        );
      } finally {
        server.resume();
      }
    });
  });
});

/**
 * A MySQL that is down (restarting, failing over, not up yet beside the app) refuses the
 * connection: the start waits for it within DB_START_TIMEOUT_MS, as for one that does not
 * answer, rather than exit at once saying only `connect ECONNREFUSED <address>`.
 */
describe('openSessionDataSource: a MySQL that refuses connections at the start', () => {
  it('starts once the server is back within DB_START_TIMEOUT_MS', async () => {
    const server = await PrivateMariaDb.start();
    try {
      await server.stop('SIGKILL');
      let outcome = 'waiting';
      const start = openSessionDataSource({ url: `${server.url}/loom`, startTimeoutMs: 60_000 });
      start.then(
        () => (outcome = 'opened'),
        (err: Error) => (outcome = `failed: ${err.message}`),
      );
      // Still waiting once a refused connection has come back (the server is down).
      await new Promise((r) => setTimeout(r, 1500));
      expect(outcome).toBe('waiting');
      await server.restart();
      const ds = await start;
      await ds.query('SELECT 1');
      await ds.destroy();
    } finally {
      await server.destroy();
    }
  });

  it('gives up after DB_START_TIMEOUT_MS, naming MySQL and the step', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port: free } = probe.address() as AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    await expect(
      openSessionDataSource({ url: `mysql://root@127.0.0.1:${port}/loom`, startTimeoutMs: 1500 }),
    ).rejects.toThrow(
      new RegExp(
        `^MySQL at 127\\.0\\.0\\.1:${port} refused every connection for 1500 ms \\(DB_START_TIMEOUT_MS\\) while connecting: .*ECONNREFUSED`,
      ),
    );
  });
});
