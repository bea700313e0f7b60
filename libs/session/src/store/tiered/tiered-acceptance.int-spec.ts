/**
 * Acceptance of the session library (issue 2) on real MySQL and Redis: ordering under
 * concurrency, rebuilding the hot tier after a flush, Redis paused and stopped, fencing, ids.
 * Cases (b) and (c) run on a private redis-server that they flush, pause and kill.
 */
import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { ConversationRepository } from '../../conversation/conversation.repository';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { newId } from '../../ids';
import { ConversationLock } from '../../lock/conversation-lock';
import { StateKeys } from '../../model/state-keys';
import { ListItem, StoreScope } from '../session-store';
import {
  keysUnder,
  openTieredStore,
  PrivateRedisServer,
  readyRedis,
  sleep,
  timed,
} from './tiered-acceptance.fixtures';
import { TieredSessionStore } from './tiered-session.store';

const MESSAGES = StateKeys.messages;
const GUARD = { callTimeoutMs: 200, failureThreshold: 3, halfOpenAfterMs: 1000 };
/** No call may wait longer than this while Redis is away: the breaker's time-out plus a margin. */
const BOUND_MS = GUARD.callTimeoutMs + 1000;

const range = (from: number, to: number): number[] =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);
const indexes = (items: ListItem[]): number[] => items.map((i) => i.index);
const scopeOf = (): StoreScope => ({ tenantId: newId('t') });
const message = (content: string) => ({
  role: 'user' as const,
  content,
  agentType: null,
  taskId: null,
  createdAt: new Date(0).toISOString(),
  tokens: 1,
});

async function outcome(call: () => Promise<unknown>): Promise<string> {
  try {
    await call();
    return 'resolved';
  } catch (err) {
    return err instanceof LoomError ? err.code : `not a LoomError: ${String(err).slice(0, 200)}`;
  }
}

/** The raw zset of a cached list: [score, member] pairs, sentinel included. */
async function zset(redis: Redis, key: string): Promise<Array<[number, string]>> {
  const flat = await redis.zrange(key, 0, -1, 'WITHSCORES');
  const out: Array<[number, string]> = [];
  for (let i = 0; i < flat.length; i += 2) out.push([Number(flat[i + 1]), flat[i]]);
  return out;
}

describe('tiered store acceptance (real MySQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  const prefix = createTestPrefix('loomacc');
  let shared: Redis;
  let privateServer: PrivateRedisServer;
  const opened: Array<{ close(): Promise<void> }> = [];
  const open = async (redisUrl: string, keyPrefix: string, name: string) => {
    const store = await openTieredStore(db.url, redisUrl, keyPrefix, name, GUARD);
    opened.push(store);
    return store;
  };

  beforeAll(async () => {
    db = await createTestDatabase('loom_acc');
    shared = new Redis(TEST_REDIS_URL);
    privateServer = await PrivateRedisServer.start();
  });

  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
  });

  afterAll(async () => {
    await privateServer?.kill();
    shared?.disconnect();
    await Promise.all([db?.drop(), prefix.cleanup()]);
  });

  it('(a) 200 concurrent appends from 4 stores get indexes 1..200, in the same order in Redis and MySQL', async () => {
    const stores = await Promise.all(
      range(1, 4).map((i) => open(TEST_REDIS_URL, prefix.prefix, `acc-a-${i}`)),
    );
    const scope = scopeOf();
    const sid = newId('c');
    await stores[0].save(scope, sid, StateKeys.conversation, { title: 'a' });
    expect(await stores[0].getList(scope, sid, MESSAGES)).toEqual([]); // caches the empty list whole

    const started = performance.now();
    const calls = await Promise.all(
      range(1, 200).map((n) =>
        timed(() => stores[n % 4].append(scope, sid, MESSAGES, { n, by: n % 4 })),
      ),
    );
    const totalMs = performance.now() - started;
    expect(calls.map((c) => c.value).sort((x, y) => x - y)).toEqual(range(1, 200));

    const mysql = await stores[0].durable.getList<{ n: number }>(scope, sid, MESSAGES);
    expect(indexes(mysql)).toEqual(range(1, 200));
    expect(mysql.map((i) => i.value.n).sort((x, y) => x - y)).toEqual(range(1, 200));
    // each append's returned index holds that append's item
    const byN = new Map(calls.map((c, i) => [i + 1, c.value]));
    for (const item of mysql) expect(byN.get(item.value.n)).toBe(item.index);

    // Redis never presents a complete list that differs from MySQL; after a read it holds it whole.
    const fromWrites = await stores[2].hot.getListIfComplete(scope, sid, MESSAGES);
    if (fromWrites !== null) expect(fromWrites).toEqual(mysql);
    expect(await stores[1].getList(scope, sid, MESSAGES)).toEqual(mysql);
    expect(await stores[3].hot.getListIfComplete(scope, sid, MESSAGES)).toEqual(mysql);
    const raw = await zset(shared, stores[0].hot.keys.list(sid, MESSAGES));
    expect(raw.map(([score]) => score)).toEqual(range(0, 200));
    expect(raw.slice(1).map(([, m]) => m)).toEqual(
      mysql.map((i) => `${i.index}|${JSON.stringify(i.value)}`),
    );

    const ms = calls.map((c) => c.ms).sort((x, y) => x - y);
    console.log(
      `acceptance (a): 200 concurrent appends from 4 stores in ${totalMs.toFixed(0)} ms ` +
        `(per append p50 ${ms[99].toFixed(1)} ms, max ${ms[199].toFixed(1)} ms); indexes 1..200, ` +
        `Redis order = MySQL order; Redis held the list whole from the writes alone: ${fromWrites !== null}`,
    );
  });

  it('(b) after FLUSHALL every session reads back whole from MySQL and refills Redis', async () => {
    const writer = await open(privateServer.url, 'accb:', 'acc-b-writer');
    const scope = scopeOf();
    const sessions = range(1, 5).map((s) => ({
      sid: newId('c'),
      meta: { title: `session ${s}`, n: s },
      summary: { text: `summary ${s}` },
      messages: range(1, 10 * s).map((m) => message(`s${s} m${m}`)),
      tasks: range(1, s).map((t) => `task-${s}-${t}`),
    }));
    for (const s of sessions) {
      await writer.save(scope, s.sid, StateKeys.conversation, s.meta);
      await writer.save(scope, s.sid, StateKeys.summary, s.summary);
      for (const m of s.messages) await writer.append(scope, s.sid, MESSAGES, m);
      for (const t of s.tasks) await writer.append(scope, s.sid, StateKeys.tasks, t);
    }
    const probe = new Redis(privateServer.url);
    opened.push({ close: async () => probe.disconnect() });
    await probe.flushall();
    expect(await probe.dbsize()).toBe(0);

    const reader = await open(privateServer.url, 'accb:', 'acc-b-reader');
    const keys = reader.hot.keys;
    for (const s of sessions) {
      expect(await reader.get(scope, s.sid, StateKeys.conversation)).toEqual(s.meta);
      expect(await reader.get(scope, s.sid, StateKeys.summary)).toEqual(s.summary);
      const list = await reader.getList(scope, s.sid, MESSAGES);
      expect(list).toEqual(s.messages.map((value, i) => ({ index: i + 1, value })));
      const tasks = await reader.getList(scope, s.sid, StateKeys.tasks);
      expect(tasks).toEqual(s.tasks.map((value, i) => ({ index: i + 1, value })));
      expect(await reader.listSessionKeys(scope, s.sid)).toEqual(
        [StateKeys.conversation, MESSAGES, StateKeys.summary, StateKeys.tasks].sort(),
      );
      // the hot tier is refilled
      expect(await probe.exists(keys.list(s.sid, MESSAGES))).toBe(1);
      expect(await probe.zcard(keys.list(s.sid, MESSAGES))).toBe(s.messages.length + 1);
      expect(await probe.exists(keys.value(s.sid, StateKeys.conversation))).toBe(1);
      expect(await reader.hot.getListIfComplete(scope, s.sid, MESSAGES)).toEqual(list);
      expect(await reader.hot.get(scope, s.sid, StateKeys.summary)).toEqual(s.summary);
    }
  });

  it('(c) Redis paused, then killed: MySQL answers within the bound, and Redis is used again once back', async () => {
    const store = await open(privateServer.url, 'accc:', 'acc-c');
    const probe = new Redis(privateServer.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    probe.on('error', () => undefined);
    opened.push({ close: async () => probe.disconnect() });
    const scope = scopeOf();
    const sid = newId('c');
    const listKey = store.hot.keys.list(sid, MESSAGES);
    await store.save(scope, sid, StateKeys.conversation, { title: 'c' });
    let count = 0;
    const appendOne = () => store.append(scope, sid, MESSAGES, message(`m${++count}`));
    const expectWhole = (items: ListItem[]) => {
      expect(indexes(items)).toEqual(range(1, count));
      expect(items.map((i) => (i.value as { content: string }).content)).toEqual(
        range(1, count).map((n) => `m${n}`),
      );
    };
    for (let i = 0; i < 20; i++) await appendOne();
    expectWhole(await store.getList(scope, sid, MESSAGES));
    expect(await store.hot.getListIfComplete(scope, sid, MESSAGES)).not.toBeNull();

    const all: number[] = [];
    /** One append and two reads, each timed; every read must see the whole list. */
    const round = async (): Promise<number[]> => {
      const a = await timed(appendOne);
      expect(a.value).toBe(count);
      const l = await timed(() => store.getList(scope, sid, MESSAGES));
      expectWhole(l.value);
      const g = await timed(() => store.get(scope, sid, StateKeys.conversation, true));
      expect(g.value).toEqual({ title: 'c' });
      all.push(a.ms, l.ms, g.ms);
      return [a.ms, l.ms, g.ms];
    };
    /** Rounds until the breaker opens, then rounds while it is open: those must not wait. */
    const whileAway = async () => {
      let rounds = 0;
      while (!store.guard.isOpen && rounds < 10) {
        await round();
        rounds++;
      }
      expect(store.guard.isOpen).toBe(true);
      const open: number[] = [];
      for (let i = 0; i < 10 && store.guard.isOpen; i++) open.push(...(await round()));
      expect(open.length).toBeGreaterThanOrEqual(15);
      expect(Math.max(...open)).toBeLessThan(GUARD.callTimeoutMs);
      return { roundsToOpen: rounds, maxOpen: Math.max(...open) };
    };
    /** Polls until the store reads the whole list from Redis again; returns how long it took. */
    const untilRedisUsed = async (since: number): Promise<number> => {
      for (;;) {
        await round();
        const hot = await probe.zrange(listKey, 0, -1);
        if (!store.guard.isOpen && hot.length === count + 1) break;
        if (performance.now() - since > 15_000) throw new Error('Redis was not used again');
        await sleep(100);
      }
      expectWhole((await store.hot.getListIfComplete(scope, sid, MESSAGES))!);
      const a = await timed(appendOne); // and the write path reaches Redis again
      all.push(a.ms);
      expect(await probe.zscore(listKey, `${count}|${JSON.stringify(message(`m${count}`))}`)).toBe(
        String(count),
      );
      return performance.now() - since;
    };
    await probe.connect();

    privateServer.pause();
    const paused = await whileAway();
    privateServer.resume();
    const resumedAt = performance.now();
    await sleep(GUARD.halfOpenAfterMs + 50);
    // the first read after Redis is back already sees everything appended meanwhile
    const first = await timed(() => store.getList(scope, sid, MESSAGES));
    all.push(first.ms);
    expectWhole(first.value);
    const pauseRecoveryMs = await untilRedisUsed(resumedAt);

    probe.disconnect();
    await privateServer.kill();
    const killed = await whileAway();
    await privateServer.restart();
    const restartedAt = performance.now();
    await probe.connect();
    const killRecoveryMs = await untilRedisUsed(restartedAt);
    probe.disconnect();

    expect(Math.max(...all)).toBeLessThanOrEqual(BOUND_MS);
    console.log(
      `acceptance (c): ${all.length} calls, slowest ${Math.max(...all).toFixed(0)} ms (bound ${BOUND_MS} ms); ` +
        `paused: breaker open after ${paused.roundsToOpen} round(s), slowest call while open ` +
        `${paused.maxOpen.toFixed(1)} ms, Redis used again ${pauseRecoveryMs.toFixed(0)} ms after SIGCONT; ` +
        `killed: open after ${killed.roundsToOpen} round(s), slowest while open ${killed.maxOpen.toFixed(1)} ms, ` +
        `Redis used again ${killRecoveryMs.toFixed(0)} ms after restart; ${count} messages whole throughout`,
    );
  });

  it("(d) an expired lock holder's late write is rejected by its fencing token", async () => {
    const store = await open(TEST_REDIS_URL, prefix.prefix, 'acc-d');
    const lockRedis = await readyRedis(TEST_REDIS_URL, 'acc-d-lock');
    opened.push({ close: async () => lockRedis.disconnect() });
    const lock = new ConversationLock(lockRedis, store.hot.keys, store, {
      ttlMs: 200,
      waitMs: 2000,
    });
    const repo = new ConversationRepository(store, { idleExpiryDays: 30 });
    const owner = { tenantId: newId('t'), userId: 'user-d' };
    const scope = { tenantId: owner.tenantId };
    const { meta } = await repo.create(owner);
    const cid = meta.conversationId;

    const first = await lock.acquire(scope, cid);
    expect((await repo.appendMessage(owner, cid, message('first'), first.fence)).seq).toBe(1);
    // First's process stalls (a long GC pause, a blocked event loop): it cannot renew, its lock
    // expires, and it does not know.
    const stalledUntil = Date.now() + 300;
    while (Date.now() < stalledUntil);
    const second = await lock.acquire(scope, cid, 100);
    expect(second.fence).toBe(first.fence + 1);

    const rows = async () => {
      const conn = await createConnection(db.url);
      try {
        const [r] = await conn.query(
          'SELECT state_key, item_index, state_data FROM loom_session_state WHERE session_id = ? ORDER BY state_key, item_index',
          [cid],
        );
        return r;
      } finally {
        await conn.end();
      }
    };
    const listKey = store.hot.keys.list(cid, MESSAGES);
    const before = { mysql: await rows(), redis: await zset(shared, listKey) };
    const late = {
      appendMessage: await outcome(() =>
        repo.appendMessage(owner, cid, message('late'), first.fence),
      ),
      storeAppend: await outcome(() =>
        store.append(scope, cid, MESSAGES, message('late'), { fence: first.fence }),
      ),
      save: await outcome(() => repo.save(owner, { ...meta, title: 'late' }, first.fence)),
    };
    expect(late).toEqual({
      appendMessage: LoomErrorCode.STALE_FENCING_TOKEN,
      storeAppend: LoomErrorCode.STALE_FENCING_TOKEN,
      save: LoomErrorCode.STALE_FENCING_TOKEN,
    });
    expect({ mysql: await rows(), redis: await zset(shared, listKey) }).toEqual(before);
    expect(await first.renew()).toBe(false);
    await first.release(); // must not release the successor's lock
    expect(await lockRedis.get(store.hot.keys.lock(cid))).toBe(second.token);

    const ok = await repo.appendMessage(owner, cid, message('second'), second.fence);
    expect(ok.seq).toBe(2);
    expect((await repo.messages(owner, cid)).map((m) => [m.seq, m.content])).toEqual([
      [1, 'first'],
      [2, 'second'],
    ]);
    await second.release();
    expect(await lockRedis.exists(store.hot.keys.lock(cid))).toBe(0);
  });

  describe('(e) invalid ids', () => {
    const BAD = ['../x', 'a/b', '*', '{x}', 'x\u0000y', 'a'.repeat(10 * 1024)];
    const keyPrefix = `${prefix.prefix}e:`;
    const owner = { tenantId: newId('t'), userId: 'user-e' };
    const scope = { tenantId: owner.tenantId };
    let store: TieredSessionStore;

    beforeEach(async () => {
      store = await open(TEST_REDIS_URL, keyPrefix, 'acc-e');
    });

    it('are rejected with INVALID_ID and nothing is written anywhere', async () => {
      const lockRedis = await readyRedis(TEST_REDIS_URL, 'acc-e-lock');
      opened.push({ close: async () => lockRedis.disconnect() });
      const lock = new ConversationLock(lockRedis, store.hot.keys, store, {
        ttlMs: 200,
        waitMs: 100,
      });
      const repo = new ConversationRepository(store, { idleExpiryDays: 30 });
      for (const bad of BAD) {
        const calls: Record<string, () => Promise<unknown>> = {
          'repo.create': () => repo.create(owner, bad),
          'repo.find': () => repo.find(owner, bad),
          'repo.appendMessage': () => repo.appendMessage(owner, bad, message('x')),
          'repo.messages': () => repo.messages(owner, bad),
          'store.save': () => store.save(scope, bad, StateKeys.conversation, { x: 1 }),
          'store.create': () => store.create(scope, bad, StateKeys.conversation, { x: 1 }),
          'store.get': () => store.get(scope, bad, StateKeys.conversation),
          'store.append': () => store.append(scope, bad, MESSAGES, { x: 1 }),
          'store.getList': () => store.getList(scope, bad, MESSAGES),
          'store.exists': () => store.exists(scope, bad),
          'store.deleteKey': () => store.deleteKey(scope, bad, MESSAGES),
          'store.delete': () => store.delete(scope, bad),
          'store.nextFence': () => store.nextFence(scope, bad),
          'lock.acquire': () => lock.acquire(scope, bad),
        };
        const got: Record<string, string> = {};
        for (const [name, call] of Object.entries(calls)) got[name] = await outcome(call);
        expect(got).toEqual(
          Object.fromEntries(Object.keys(calls).map((n) => [n, LoomErrorCode.INVALID_ID])),
        );
      }

      const conn = await createConnection(db.url);
      try {
        const [[mine]] = (await conn.query(
          'SELECT COUNT(*) AS n FROM loom_session_state WHERE tenant_id = ?',
          [owner.tenantId],
        )) as any;
        const [[odd]] = (await conn.query(
          "SELECT COUNT(*) AS n FROM loom_session_state WHERE session_id NOT REGEXP '^[A-Za-z0-9_-]{8,128}$'",
        )) as any;
        expect({ tenantRows: Number(mine.n), invalidIdRows: Number(odd.n) }).toEqual({
          tenantRows: 0,
          invalidIdRows: 0,
        });
      } finally {
        await conn.end();
      }
      expect(await keysUnder(shared, keyPrefix)).toEqual([]);
    });

    it('do not count as Redis failures (the breaker stays closed)', async () => {
      for (const bad of BAD) {
        await expect(store.listLength(scope, bad, MESSAGES)).rejects.toMatchObject({
          code: LoomErrorCode.INVALID_ID,
        });
        await expect(store.getList(scope, bad, MESSAGES)).rejects.toMatchObject({
          code: LoomErrorCode.INVALID_ID,
        });
      }
      expect(store.guard.isOpen).toBe(false);
    });
  });
});
