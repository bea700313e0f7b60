import { createTestDatabase, FreezableTcpProxy } from '@loom/testing';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { newId } from '../../ids';
import { openSessionDataSource } from './data-source';
import { MysqlSessionStore } from './mysql-session.store';

/** A database that stops answering without closing anything: every call ends, typed. */
describe('mysql store: a database that stops answering', () => {
  const alice = { tenantId: 'tenant-a' };
  let proxy: FreezableTcpProxy;
  let store: MysqlSessionStore;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase();
    drop = db.drop;
    const url = new URL(db.url);
    proxy = await FreezableTcpProxy.start({ host: url.hostname, port: Number(url.port || 3306) });
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    store = new MysqlSessionStore(
      await openSessionDataSource({ url: url.toString(), poolSize: 2 }),
      {
        queryTimeoutMs: 300,
      },
    );
  });
  afterAll(async () => {
    proxy.thaw();
    await store.close();
    await proxy.close();
    await drop();
  });

  const outcome = (p: Promise<unknown>) =>
    p.then(
      () => 'answered',
      (err) => (LoomError.is(err, LoomErrorCode.UNAVAILABLE) ? 'UNAVAILABLE' : String(err)),
    );

  it('answers UNAVAILABLE for every call, more calls than connections, then resumes', async () => {
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { v: 1 });
    proxy.freeze();
    const calls = [
      store.get(alice, sid, 'conversation'),
      store.save(alice, sid, 'conversation', { v: 2 }),
      store.append(alice, sid, 'messages', { text: 'hi' }),
      store.getList(alice, sid, 'messages'),
      store.exists(alice, sid),
    ];
    expect(await Promise.all(calls.map(outcome))).toEqual(Array(5).fill('UNAVAILABLE'));
    expect(await outcome(store.get(alice, sid, 'conversation'))).toBe('UNAVAILABLE');

    proxy.thaw();
    // The statements sent before the freeze now reach MySQL; whatever they did, reads work again.
    let value: unknown = null;
    for (let i = 0; i < 50 && value === null; i++) {
      value = await store.get(alice, sid, 'conversation').catch(() => null);
      if (value === null) await new Promise((r) => setTimeout(r, 100));
    }
    expect([{ v: 1 }, { v: 2 }]).toContainEqual(value);
  });

  it('after a failover that leaves its connections hanging, reconnects instead of answering 503 for good', async () => {
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { v: 1 });
    // The old connections (both of the pool's, busy or idle) lead nowhere now; new ones reach
    // the database. Nothing closes the old ones: only a time-out can tell.
    await Promise.all([store.get(alice, sid, 'conversation'), store.exists(alice, sid)]);
    proxy.strand();
    const outcomes: string[] = [];
    for (let i = 0; i < 20; i++) {
      const outcome_ = await outcome(store.get(alice, sid, 'conversation'));
      outcomes.push(outcome_);
      if (outcome_ === 'answered') break;
    }
    // A few calls may time out on the stranded connections; then the pool reconnects.
    expect(outcomes[outcomes.length - 1]).toBe('answered');
    expect(outcomes.slice(0, -1).every((o) => o === 'UNAVAILABLE')).toBe(true);
  });
});
