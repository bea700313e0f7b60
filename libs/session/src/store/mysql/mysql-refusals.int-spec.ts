import { createConnection, Connection, RowDataPacket } from 'mysql2/promise';
import { FreezableTcpProxy, PrivateMariaDb } from '@loom/testing';
import { LoomError } from '../../errors/session-error';
import { newId } from '../../ids';
import { openSessionDataSource } from './data-source';
import { MysqlSessionStore } from './mysql-session.store';

/** A user without the privileges that bypass read_only, as an application's user is. */
async function appUser(db: PrivateMariaDb, database: string): Promise<string> {
  const admin = await createConnection(db.url);
  await admin.query(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
  await admin.query("CREATE USER IF NOT EXISTS 'loom'@'127.0.0.1' IDENTIFIED BY 'loom-pass'");
  await admin.query(`GRANT ALL PRIVILEGES ON \`${database}\`.* TO 'loom'@'127.0.0.1'`);
  await admin.end();
  return `mysql://loom:loom-pass@127.0.0.1:${db.port}/${database}`;
}

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'answered',
    (err) => (LoomError.is(err) ? err.code : `raw ${(err as { errno?: number }).errno}`),
  );

/**
 * MySQL refusing a statement for a while, not because of the request: a server made read-only
 * (the former primary after a failover). A turn should get 503 UNAVAILABLE and a retry, not 500.
 */
describe('mysql store: a server that refuses writes for now', () => {
  const alice = { tenantId: 'tenant-a' };
  let primary: PrivateMariaDb;
  let admin: Connection;
  let store: MysqlSessionStore;

  beforeAll(async () => {
    primary = await PrivateMariaDb.start();
    const url = await appUser(primary, 'loom_refusals');
    store = new MysqlSessionStore(await openSessionDataSource({ url, poolSize: 2 }));
    admin = await createConnection(primary.url);
  });
  afterAll(async () => {
    await admin?.end();
    await store?.close();
    await primary?.destroy();
  });

  it('a read-only server answers writes UNAVAILABLE, and they succeed once it is writable', async () => {
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { v: 1 });
    await admin.query('SET GLOBAL read_only = 1');
    try {
      expect(await outcome(store.save(alice, sid, 'conversation', { v: 2 }))).toBe('UNAVAILABLE');
      expect(await outcome(store.append(alice, sid, 'messages', { text: 'hi' }))).toBe(
        'UNAVAILABLE',
      );
      expect(await outcome(store.nextFence(alice, sid))).toBe('UNAVAILABLE');
      expect(await store.get(alice, sid, 'conversation')).toEqual({ v: 1 });
    } finally {
      await admin.query('SET GLOBAL read_only = 0');
    }
    await store.save(alice, sid, 'conversation', { v: 3 });
    expect(await store.get(alice, sid, 'conversation')).toEqual({ v: 3 });
  });

  it('starts as a user that may only read and write the table (DB_MIGRATIONS_RUN=false)', async () => {
    await admin.query("CREATE USER IF NOT EXISTS 'loom_dml'@'127.0.0.1' IDENTIFIED BY 'dml-pass'");
    await admin.query(
      "GRANT SELECT, INSERT, UPDATE, DELETE ON `loom_refusals`.* TO 'loom_dml'@'127.0.0.1'",
    );
    const url = `mysql://loom_dml:dml-pass@127.0.0.1:${primary.port}/loom_refusals`;
    const dml = new MysqlSessionStore(await openSessionDataSource({ url, migrationsRun: false }));
    try {
      const sid = newId('c');
      await dml.save(alice, sid, 'conversation', { v: 1 });
      expect(await dml.get(alice, sid, 'conversation')).toEqual({ v: 1 });
    } finally {
      await dml.close();
    }
  });

  it('a statement the server interrupts (KILL QUERY by an operator) is UNAVAILABLE', async () => {
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { v: 1 });
    // An operator's transaction holds the row; the store's write waits for it, and is killed.
    const holder = await createConnection(`${primary.url}/loom_refusals`);
    await holder.query('START TRANSACTION');
    await holder.query(
      "SELECT * FROM loom_session_state WHERE session_id = ? AND state_key = 'conversation' FOR UPDATE",
      [sid],
    );
    const write = outcome(store.save(alice, sid, 'conversation', { v: 2 }));
    try {
      let id: number | undefined;
      for (let i = 0; i < 100 && id === undefined; i++) {
        const [rows] = await admin.query<RowDataPacket[]>(
          "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'loom' AND INFO LIKE 'INSERT INTO loom_session_state%'",
        );
        id = rows[0]?.ID;
        if (id === undefined) await new Promise((r) => setTimeout(r, 50));
      }
      expect(id).toBeDefined();
      await admin.query(`KILL QUERY ${Number(id)}`);
      expect(await write).toBe('UNAVAILABLE');
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    await store.save(alice, sid, 'conversation', { v: 3 });
    expect(await store.get(alice, sid, 'conversation')).toEqual({ v: 3 });
  });
});

/**
 * A failover that moves the database's address to the new primary and leaves the former one up,
 * read-only: the connections open before it still lead there. Writes must reach the new primary
 * without restarting the process.
 */
describe('mysql store: a failover that leaves the former primary up, read-only', () => {
  const alice = { tenantId: 'tenant-a' };
  let former: PrivateMariaDb;
  let next: PrivateMariaDb;
  let proxy: FreezableTcpProxy;
  let store: MysqlSessionStore;

  beforeAll(async () => {
    former = await PrivateMariaDb.start();
    next = await PrivateMariaDb.start();
    await appUser(former, 'loom_failover');
    const nextUrl = new URL(await appUser(next, 'loom_failover'));
    // The new primary holds the schema already, as a replica would.
    await (await openSessionDataSource({ url: nextUrl.toString(), poolSize: 1 })).destroy();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: former.port });
    nextUrl.port = String(proxy.port);
    store = new MysqlSessionStore(
      await openSessionDataSource({ url: nextUrl.toString(), poolSize: 3 }),
    );
  });
  afterAll(async () => {
    await store?.close();
    await proxy?.close();
    await Promise.all([former?.destroy(), next?.destroy()]);
  });

  it('answers UNAVAILABLE while its connections reach the former primary, then writes to the new one', async () => {
    const sid = newId('c');
    // Every connection of the pool opened, each left idle in it.
    await Promise.all([1, 2, 3].map((v) => store.save(alice, sid, `value_${v}`, { v })));
    const admin = await createConnection(former.url);
    await admin.query('SET GLOBAL read_only = 1');
    await admin.end();
    proxy.retarget({ host: '127.0.0.1', port: next.port });

    const outcomes: string[] = [];
    for (let i = 0; i < 10 && outcomes[outcomes.length - 1] !== 'answered'; i++)
      outcomes.push(await outcome(store.save(alice, sid, 'conversation', { after: i })));
    expect(outcomes.slice(0, -1).every((o) => o === 'UNAVAILABLE')).toBe(true);
    expect(outcomes[outcomes.length - 1]).toBe('answered');
  });
});
