import Redis from 'ioredis';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { RedisSessionStore } from '../redis/redis-session.store';
import { runSessionStoreContract } from '../session-store.contract';
import { newId } from '../../ids';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { AppendOptions, StoreScope } from '../session-store';
import { DEFAULT_GUARD } from './hot-tier-guard';
import { TieredOptions, TieredSessionStore } from './tiered-session.store';

/** A tiered store (no LRU) on a database and a key prefix of its own; cleanup drops both. */
async function tieredOnRealServers() {
  const db = await createTestDatabase();
  const prefix = createTestPrefix();
  const durable = new MysqlSessionStore(await openSessionDataSource({ url: db.url }));
  const hot = new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix, {
    authoritative: false,
  });
  const store = new TieredSessionStore(durable, hot, {
    ttlFor: ttlRules(DEFAULT_TTL),
    lruTtlMs: 0,
  });
  return {
    store,
    durable,
    hot,
    cleanup: async () => {
      await store.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    },
  };
}

runSessionStoreContract('tiered (LRU → Redis → MySQL)', tieredOnRealServers);

/**
 * A tiered store on real servers for one describe block, with a Redis connection of its own to
 * look at the hot tier: filled in beforeAll, closed in afterAll.
 */
function tieredSuite() {
  const t = {} as {
    store: TieredSessionStore;
    durable: MysqlSessionStore;
    hot: RedisSessionStore;
    redis: Redis;
  };
  let cleanup = async (): Promise<void> => undefined;
  beforeAll(async () => {
    const tiered = await tieredOnRealServers();
    Object.assign(t, { ...tiered, redis: new Redis(TEST_REDIS_URL) });
    cleanup = async () => {
      t.redis.disconnect();
      await tiered.cleanup();
    };
  });
  afterAll(() => cleanup());
  return t;
}

/**
 * Cuts a connected client off until it is connected again, waiting until it has ended: ioredis
 * refuses to connect() a client whose socket is still closing ("already connecting/connected"),
 * and the commands sent meanwhile meet a closed client every time.
 */
async function cutOff(redis: Redis): Promise<void> {
  const ended = new Promise((resolve) => redis.once('end', resolve));
  redis.disconnect();
  await ended;
}
describe('tiered store: keys MySQL does not hold', () => {
  const alice = { tenantId: 'tenant-a' };
  const bob = { tenantId: 'tenant-b' };

  const t = tieredSuite();

  it('answers later reads from a Redis marker, which the next write replaces', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    const reads = jest.spyOn(t.durable, 'get');
    expect(await t.store.get(alice, sid, 'summary')).toBeNull();
    expect(await t.store.get(alice, sid, 'summary')).toBeNull();
    expect(await t.store.get(alice, sid, 'summary')).toBeNull();
    expect(reads).toHaveBeenCalledTimes(1);
    reads.mockRestore();
    const raw = t.store.hot.keys.value(sid, 'summary');
    expect(await t.redis.get(raw)).toBe('\u0000absent');
    // A sliding key's reads extend values, not markers: the marker keeps its own hour at most.
    expect(await t.redis.pttl(raw)).toBeLessThanOrEqual(3_600_000);

    await t.store.save(alice, sid, 'summary', { text: 'folded', toSeq: 4 });
    expect(await t.store.get(alice, sid, 'summary')).toEqual({ text: 'folded', toSeq: 4 });
    expect(await t.store.durable.get(alice, sid, 'summary')).toEqual({ text: 'folded', toSeq: 4 });
  });

  it('a consistent read does not trust a marker: a writer that died after MySQL committed is seen', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    expect(await t.store.get(alice, sid, 'agent:a_1')).toBeNull();
    const raw = t.store.hot.keys.value(sid, 'agent:a_1');
    expect(await t.redis.get(raw)).toBe('\u0000absent');
    // The agent's final write reached MySQL, then its process died before the Redis write.
    await t.store.durable.save(alice, sid, 'agent:a_1', { status: 'COMPLETED' });
    expect(await t.store.get(alice, sid, 'agent:a_1', true)).toEqual({ status: 'COMPLETED' });
    // ...and the stale marker is gone, so everyone else's next read finds the value too.
    expect(await t.store.get(alice, sid, 'agent:a_1')).toEqual({ status: 'COMPLETED' });
    expect(await t.redis.get(raw)).not.toBe('\u0000absent');
  });

  it('a consistent read answers from MySQL when Redis holds an older copy, and drops that copy', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { v: 0, activeTaskIds: [] });
    const raw = t.store.hot.keys.value(sid, 'conversation');
    const cached = await t.redis.get(raw);
    // Another process committed v1 to MySQL, and its Redis write failed (or it died first).
    await t.store.durable.save(alice, sid, 'conversation', { v: 1, activeTaskIds: ['t1'] });
    expect(await t.redis.get(raw)).toBe(cached);
    expect(await t.store.get(alice, sid, 'conversation', true)).toEqual({
      v: 1,
      activeTaskIds: ['t1'],
    });
    expect(await t.redis.exists(raw)).toBe(0);
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ v: 1, activeTaskIds: ['t1'] });
  });

  it('a refill from MySQL never replaces a newer value another process wrote meanwhile', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.save(alice, sid, 'task:t_refill0001', { status: 'RUNNING' });
    await t.store.invalidate(sid); // recovery dropped the hot copies (or Redis lost them)
    // A reader misses Redis and reads MySQL; before its refill lands, the worker completes the
    // task (MySQL, then Redis).
    const read = t.durable.get.bind(t.durable);
    const spy = jest.spyOn(t.durable, 'get').mockImplementationOnce(async (...args) => {
      const old = await read(...args);
      await t.store.save(alice, sid, 'task:t_refill0001', { status: 'COMPLETED' });
      return old;
    });
    expect(await t.store.get(alice, sid, 'task:t_refill0001')).toEqual({ status: 'RUNNING' });
    spy.mockRestore();
    // What every other process reads next (this one's LRU keeps its read for lruTtlMs).
    expect(await t.store.hot.get(alice, sid, 'task:t_refill0001')).toEqual({ status: 'COMPLETED' });
  });

  it('writes the value as it was when save was called to every tier', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    const task = { executions: [] as string[] };
    const saving = t.store.save(alice, sid, 'task:t_snapshot01', task);
    task.executions.push('changed while the write was in flight');
    await saving;
    expect(await t.store.durable.get(alice, sid, 'task:t_snapshot01')).toEqual({ executions: [] });
    expect(await t.store.hot.get(alice, sid, 'task:t_snapshot01')).toEqual({ executions: [] });
    expect(await t.store.get(alice, sid, 'task:t_snapshot01')).toEqual({ executions: [] });
  });

  it('a consistent read that agrees with Redis leaves the cached copy alone', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { v: 3 });
    const raw = t.store.hot.keys.value(sid, 'conversation');
    const cached = await t.redis.get(raw);
    expect(await t.store.get(alice, sid, 'conversation', true)).toEqual({ v: 3 });
    expect(await t.redis.get(raw)).toBe(cached);
  });

  it('invalidating a session (recovery) drops its markers with its values', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    expect(await t.store.get(alice, sid, 'summary')).toBeNull();
    await t.store.durable.save(alice, sid, 'summary', { text: 'folded', toSeq: 4 });
    await t.store.invalidate(sid);
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'summary'))).toBe(0);
    expect(await t.store.get(alice, sid, 'summary')).toEqual({ text: 'folded', toSeq: 4 });
  });

  it('marks nothing in another tenant’s session or in a session Redis does not know', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    expect(await t.store.get(bob, sid, 'summary')).toBeNull();
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'summary'))).toBe(0);
    expect(await t.store.get(alice, sid, 'summary')).toBeNull(); // alice's own read marks it

    const unknown = newId('c');
    expect(await t.store.get(bob, unknown, 'conversation')).toBeNull();
    expect(await t.redis.exists(t.store.hot.keys.meta(unknown))).toBe(0);
    expect(await t.redis.exists(t.store.hot.keys.value(unknown, 'conversation'))).toBe(0);
  });
});

describe('tiered store: consistent reads of several values', () => {
  const alice = { tenantId: 'tenant-a' };
  const bob = { tenantId: 'tenant-b' };

  const t = tieredSuite();

  it('answers from MySQL in one statement, in the order asked, and drops Redis copies that disagree', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'task:t_abcdefgh', { status: 'RUNNING' });
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    // Another process committed to MySQL and died before its Redis write.
    await t.durable.save(alice, sid, 'task:t_abcdefgh', { status: 'COMPLETED' });
    const query = jest.spyOn(
      (t.durable as unknown as { db: { query: () => unknown } }).db,
      'query',
    );
    expect(
      await t.store.getConsistent(alice, sid, [
        'agent:a_abcdefgh',
        'task:t_abcdefgh',
        'conversation',
      ]),
    ).toEqual([null, { status: 'COMPLETED' }, { title: 'x' }]);
    expect(query).toHaveBeenCalledTimes(1);
    query.mockRestore();
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'task:t_abcdefgh'))).toBe(0);
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'conversation'))).toBe(1);
    expect(await t.store.getConsistent(bob, sid, ['task:t_abcdefgh'])).toEqual([null]);
  });
});

describe('tiered store: removing several keys', () => {
  it('removes them from MySQL in one statement and from Redis, and nothing of another tenant', async () => {
    const { store, durable, cleanup } = await tieredOnRealServers();
    const redis = new Redis(TEST_REDIS_URL);
    try {
      const alice = { tenantId: 'tenant-a' };
      const sid = newId('c');
      for (const key of ['agent:a_one12345', 'agent:a_two12345', 'conversation'])
        await store.save(alice, sid, key, { key });
      await store.deleteKeys({ tenantId: 'tenant-b' }, sid, ['agent:a_one12345']);
      expect(await durable.get(alice, sid, 'agent:a_one12345')).toEqual({
        key: 'agent:a_one12345',
      });
      const query = jest.spyOn(
        (durable as unknown as { db: { query: () => unknown } }).db,
        'query',
      );
      expect(await store.deleteKeys(alice, sid, ['agent:a_one12345', 'agent:a_two12345'])).toBe(
        true,
      );
      expect(query).toHaveBeenCalledTimes(1);
      query.mockRestore();
      expect(await durable.listSessionKeys(alice, sid)).toEqual(['conversation']);
      expect(await redis.exists(store.hot.keys.value(sid, 'agent:a_one12345'))).toBe(0);
      expect(await redis.exists(store.hot.keys.value(sid, 'agent:a_two12345'))).toBe(0);
      expect(await store.get(alice, sid, 'agent:a_two12345')).toBeNull();
      expect(await store.get(alice, sid, 'conversation')).toEqual({ key: 'conversation' });
    } finally {
      redis.disconnect();
      await cleanup();
    }
  });
});

describe('tiered store: deleting a list cached whole', () => {
  const alice = { tenantId: 'tenant-a' };
  const t = tieredSuite();

  // The stamp of its last check against MySQL (v:<key> in _meta) went with it: left behind, it
  // outlived every deleted list in the session's hash, and vouched for a list written again under
  // the same name that no read had checked.
  it.each([
    ['deleteKey', (sid: string) => t.store.deleteKey(alice, sid, 'messages')],
    ['deleteKeys', (sid: string) => t.store.deleteKeys(alice, sid, ['messages'])],
  ])('drops its check stamp with it (%s)', async (_name, remove) => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { text: 'one' });
    await t.store.append(alice, sid, 'messages', { text: 'two' });
    await t.hot.purge(sid, 'messages');
    // The first read misses and refills, the refill stamps it checked.
    await t.store.getList(alice, sid, 'messages');
    const meta = t.hot.keys.meta(sid);
    expect(await t.redis.hget(meta, 'v:messages')).not.toBeNull();
    await remove(sid);
    expect(await t.redis.hget(meta, 'v:messages')).toBeNull();
    expect(await t.store.getList(alice, sid, 'messages')).toEqual([]);
  });
});

/**
 * Every Redis key of a session lapses: its `_keys` index too. Deleting the last key a session
 * held in Redis (a task's agent sessions, where they were all Redis had of the conversation: its
 * other copies had lapsed or gone with a Redis restart) leaves the `_meta` hash with its owner;
 * the index used to come back without a TTL at the session's next write (or absent marker), and
 * outlived the session in Redis for good.
 */
describe('tiered store: a session whose cached keys were all deleted, then written again', () => {
  const alice = { tenantId: 'tenant-a' };
  const t = tieredSuite();

  /** Every key of the session in Redis with no TTL. */
  const persistent = async (sid: string): Promise<string[]> => {
    const found: string[] = [];
    const pattern = `${t.hot.keys.session(sid).replace(/[*?[\]\\]/g, '\\$&')}:*`;
    for (const key of await t.redis.keys(pattern))
      if ((await t.redis.pttl(key)) === -1) found.push(key);
    return found;
  };

  it('gives the index a TTL again when a write brings it back', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'agent:a_only1234', { step: 1 });
    await t.store.deleteKeys(alice, sid, ['agent:a_only1234']);
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { text: 'hi' });
    expect(await t.redis.smembers(t.hot.keys.keys(sid))).toEqual(
      expect.arrayContaining(['conversation', 'messages']),
    );
    expect(await persistent(sid)).toEqual([]);
  });

  it('gives the index a TTL again when an absent marker brings it back', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'agent:a_only5678', { step: 1 });
    await t.store.deleteKeys(alice, sid, ['agent:a_only5678']);
    expect(await t.store.get(alice, sid, 'summary')).toBeNull();
    expect(await t.redis.smembers(t.hot.keys.keys(sid))).toEqual(['summary']);
    expect(await persistent(sid)).toEqual([]);
  });
});

/**
 * Defence in depth: no route reaches the store with another tenant's id, but should one, the
 * store must not touch the owner's cache. A deletion's tombstone and a write's record of being
 * under way used to be left on the session before any owner check: the owner's cached copies
 * were then refused (refills, the Redis half of its writes) for a minute, or while the write ran.
 */
describe("tiered store: another tenant's deletion or write of a session", () => {
  const alice = { tenantId: 'tenant-a' };
  const bob = { tenantId: 'tenant-b' };
  const t = tieredSuite();

  it("leaves no tombstone on the owner's session, whose cache keeps serving", async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { v: 1 });
    await t.store.save(alice, sid, 'agent:a_one12345', { v: 1 });
    await t.store.delete(bob, sid);
    await t.store.deleteKeys(bob, sid, ['agent:a_one12345']);
    expect(await t.redis.exists(t.store.hot.keys.gone(sid))).toBe(0);
    expect(await t.redis.exists(t.store.hot.keys.keyGone(sid, 'agent:a_one12345'))).toBe(0);
    // The owner's next write still reaches its cached copy, and reads come from Redis.
    await t.store.save(alice, sid, 'conversation', { v: 2 });
    const reads = jest.spyOn(t.durable, 'get');
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ v: 2 });
    expect(reads).not.toHaveBeenCalled();
    reads.mockRestore();
  });

  it("records no write under way on the owner's key", async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { v: 1 });
    const hotRedis = (t.hot as unknown as { redis: Redis }).redis;
    const writing = t.store.hot.keys.writing(sid, 'conversation');
    let recorded = -1;
    const save = t.durable.save.bind(t.durable);
    const spy = jest.spyOn(t.durable, 'save').mockImplementationOnce(async (...args) => {
      recorded = await hotRedis.zcard(writing); // after the record, on its connection
      return save(...args);
    });
    await expect(t.store.save(bob, sid, 'conversation', { v: 'bob' })).rejects.toBeDefined();
    spy.mockRestore();
    expect(recorded).toBe(0);
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ v: 1 });
  });
});

describe('tiered store: a read racing a delete', () => {
  const alice = { tenantId: 'tenant-a' };

  const t = tieredSuite();
  afterEach(() => jest.restoreAllMocks());

  /** A conversation whose hot copies are gone (expired, or never read), so a read refills. */
  async function coldConversation(): Promise<string> {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { content: 'hi' });
    await t.store.invalidate(sid);
    return sid;
  }

  it('a value read from MySQL before a DELETE is not refilled after it', async () => {
    const sid = await coldConversation();
    const read = t.durable.get.bind(t.durable);
    jest.spyOn(t.durable, 'get').mockImplementationOnce(async (...args) => {
      const old = await read(...args);
      await t.store.delete(alice, sid); // DELETE /v1/conversations/:id lands here
      return old;
    });
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'x' });
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'conversation'))).toBe(0);
    expect(await t.redis.exists(t.store.hot.keys.meta(sid))).toBe(0);
    expect(await t.store.get(alice, sid, 'conversation')).toBeNull();
  });

  it('a message list read from MySQL before a DELETE is not refilled after it', async () => {
    const sid = await coldConversation();
    const read = t.durable.getList.bind(t.durable);
    jest.spyOn(t.durable, 'getList').mockImplementationOnce(async (...args) => {
      const old = await read(...args);
      await t.store.delete(alice, sid);
      return old;
    });
    expect(await t.store.getList(alice, sid, 'messages')).toEqual([
      { index: 1, value: { content: 'hi' } },
    ]);
    expect(await t.redis.exists(t.store.hot.keys.list(sid, 'messages'))).toBe(0);
    expect(await t.store.getList(alice, sid, 'messages')).toEqual([]);
  });

  it.each([
    ['deleteKey', (sid: string) => t.store.deleteKey(alice, sid, 'agent:a_gone1234')],
    ['deleteKeys', (sid: string) => t.store.deleteKeys(alice, sid, ['agent:a_gone1234'])],
  ])(
    'an agent session read from MySQL before its %s is not refilled after it',
    async (_, remove) => {
      const sid = await coldConversation();
      await t.store.save(alice, sid, 'agent:a_gone1234', { status: 'COMPLETED' });
      await t.store.invalidate(sid);
      const read = t.durable.get.bind(t.durable);
      jest.spyOn(t.durable, 'get').mockImplementationOnce(async (...args) => {
        const old = await read(...args);
        await remove(sid); // the task closed and removed its agent sessions
        return old;
      });
      expect(await t.store.get(alice, sid, 'agent:a_gone1234')).toEqual({ status: 'COMPLETED' });
      expect(await t.redis.exists(t.store.hot.keys.value(sid, 'agent:a_gone1234'))).toBe(0);
      expect(await t.store.get(alice, sid, 'agent:a_gone1234')).toBeNull();
      // The rest of the session is refilled as usual.
      expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'x' });
      expect(await t.redis.exists(t.store.hot.keys.value(sid, 'conversation'))).toBe(1);
    },
  );

  it('a save that passed MySQL before a deleteKeys does not put the key back in Redis after it', async () => {
    const sid = await coldConversation();
    const key = 'agent:a_late1234';
    await t.store.save(alice, sid, key, { status: 'RUNNING' });
    const write = t.durable.save.bind(t.durable);
    jest.spyOn(t.durable, 'save').mockImplementationOnce(async (...args) => {
      await write(...args); // the execution's write passed its guard in MySQL
      await t.store.deleteKeys(alice, sid, [key]); // then its task closed and removed it
    });
    await t.store.save(alice, sid, key, { status: 'COMPLETED' });
    expect(await t.redis.exists(t.store.hot.keys.value(sid, key))).toBe(0);
    // MySQL holds it (the guard let it in before the delete), as a late write always could.
    await t.durable.deleteKey(alice, sid, key);
    expect(await t.store.get(alice, sid, key)).toBeNull();
  });

  it.each([['conversation'], ['agent:a_late9012']])(
    'a save of %s that passed MySQL before the session DELETE does not bring it back in Redis after it',
    async (key) => {
      const sid = await coldConversation();
      const write = t.durable.save.bind(t.durable);
      jest.spyOn(t.durable, 'save').mockImplementationOnce(async (...args) => {
        await write(...args); // an agent's (or a paused holder's) write reached MySQL first
        await t.store.delete(alice, sid); // then the conversation was deleted, rows and copies
      });
      await t.store.save(alice, sid, key, { late: true });
      expect(await t.durable.get(alice, sid, key)).toBeNull(); // MySQL: deleted
      expect(await t.redis.exists(t.store.hot.keys.value(sid, key))).toBe(0);
      expect(await t.store.get(alice, sid, key)).toBeNull();
    },
  );

  it('an append that passed MySQL before the session DELETE leaves none of it in Redis after it', async () => {
    const sid = await coldConversation();
    await t.store.append(alice, sid, 'messages', { content: 'first' });
    const append = t.durable.append.bind(t.durable);
    jest.spyOn(t.durable, 'append').mockImplementationOnce(async (...args) => {
      const index = await append(...args); // a paused holder's append reached MySQL first
      await t.store.delete(alice, sid); // then the conversation was deleted, rows and copies
      return index;
    });
    await t.store.append(alice, sid, 'messages', { content: 'my phone is 13800138000' });
    expect(await t.durable.getList(alice, sid, 'messages')).toEqual([]); // MySQL: deleted
    expect(await t.redis.exists(t.store.hot.keys.list(sid, 'messages'))).toBe(0);
    expect(await t.store.getList(alice, sid, 'messages')).toEqual([]);
  });

  it('a key saved again while its tombstone lasts is not marked absent by a read that missed it before', async () => {
    const sid = await coldConversation();
    const key = 'agent:a_mark1234';
    await t.store.save(alice, sid, key, { n: 1 });
    await t.store.deleteKeys(alice, sid, [key]);
    const read = t.durable.get.bind(t.durable);
    jest.spyOn(t.durable, 'get').mockImplementationOnce(async (...args) => {
      const none = await read(...args); // MySQL holds nothing: the key was deleted
      await t.store.save(alice, sid, key, { n: 2 }); // saved again before the read marks it absent
      return none;
    });
    expect(await t.store.get(alice, sid, key)).toBeNull();
    expect(await t.durable.get(alice, sid, key)).toEqual({ n: 2 });
    expect(await t.store.get(alice, sid, key)).toEqual({ n: 2 });
  });

  it('a refill that read MySQL before a refused save is refused after the tombstone it began under', async () => {
    const sid = await coldConversation();
    const key = 'agent:a_late5678';
    await t.store.save(alice, sid, key, { n: 1 });
    await t.store.deleteKeys(alice, sid, [key]);
    await t.store.save(alice, sid, key, { n: 2 }); // in MySQL only: the tombstone lasts
    const gone = t.store.hot.keys.keyGone(sid, key);
    const read = t.durable.get.bind(t.durable);
    jest.spyOn(t.durable, 'get').mockImplementationOnce(async (...args) => {
      const old = await read(...args); // { n: 2 }
      await t.redis.pexpire(gone, 5000); // the tombstone's last seconds
      await t.store.save(alice, sid, key, { n: 3 }); // refused in Redis, made in MySQL
      // The refusal renewed it for its whole minute, so the refill below lands under it rather
      // than after the first tombstone's end. (A TTL of a few ms and a sleep past it made this
      // race the save on a loaded machine: the save could come after the lapse and be let in.)
      expect(await t.redis.pttl(gone)).toBeGreaterThan(5000);
      return old;
    });
    expect(await t.store.get(alice, sid, key)).toEqual({ n: 2 });
    expect(await t.store.get(alice, sid, key)).toEqual({ n: 3 });
    expect(await t.store.hot.probe(alice, sid, key)).toBeNull();
  });

  it('a key saved again after its deletion is read as saved, from MySQL while its tombstone lasts', async () => {
    const sid = await coldConversation();
    const key = 'agent:a_again123';
    await t.store.save(alice, sid, key, { n: 1 });
    await t.store.deleteKeys(alice, sid, [key]);
    await t.store.save(alice, sid, key, { n: 2 });
    expect(await t.store.get(alice, sid, key)).toEqual({ n: 2 });
    await t.store.save(alice, sid, key, { n: 3 });
    expect(await t.store.get(alice, sid, key)).toEqual({ n: 3 });
    expect(await t.store.hot.probe(alice, sid, key)).toBeNull();
    // Once the tombstone is gone, it is cached again.
    await t.redis.del(t.store.hot.keys.keyGone(sid, key));
    await t.store.save(alice, sid, key, { n: 4 });
    expect(await t.store.hot.get(alice, sid, key)).toEqual({ n: 4 });
  });

  it('a session written again after its DELETE is read as written, from MySQL while its tombstone lasts, then cached', async () => {
    const sid = await coldConversation();
    await t.store.delete(alice, sid);
    await t.store.save(alice, sid, 'conversation', { title: 'again' });
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'again' });
    expect(await t.store.hot.probe(alice, sid, 'conversation')).toBeNull();
    await t.redis.del(t.store.hot.keys.gone(sid));
    await t.store.save(alice, sid, 'conversation', { title: 'cached' });
    expect(await t.store.hot.get(alice, sid, 'conversation')).toEqual({ title: 'cached' });
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'cached' });
  });
});

describe('tiered store: a process killed between its MySQL delete and its Redis delete', () => {
  const alice = { tenantId: 'tenant-a' };
  const t = tieredSuite();
  afterEach(() => jest.restoreAllMocks());

  /** The process stops right after MySQL's rows went: nothing of the deletion runs after that. */
  class Killed extends Error {}
  const killedAfter =
    <A extends unknown[]>(real: (...args: A) => Promise<unknown>) =>
    async (...args: A): Promise<never> => {
      await real(...args);
      throw new Killed();
    };

  it('leaves no cached copy of a deleted session for other processes to read', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { content: 'hi' });
    // Cached in Redis, as every reader would find them.
    expect(await t.store.getList(alice, sid, 'messages')).toHaveLength(1);
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'conversation'))).toBe(1);
    jest
      .spyOn(t.durable, 'delete')
      .mockImplementationOnce(killedAfter(t.durable.delete.bind(t.durable)));
    await expect(t.store.delete(alice, sid)).rejects.toBeInstanceOf(Killed);
    expect(await t.durable.exists(alice, sid)).toBe(false);
    expect(await t.redis.exists(t.store.hot.keys.value(sid, 'conversation'))).toBe(0);
    expect(await t.redis.exists(t.store.hot.keys.list(sid, 'messages'))).toBe(0);
    expect(await t.store.get(alice, sid, 'conversation')).toBeNull();
    expect(await t.store.getList(alice, sid, 'messages')).toEqual([]);
  });
});

describe('tiered store: Redis restarted empty while a refill read MySQL', () => {
  const alice = { tenantId: 'tenant-a' };
  const t = tieredSuite();
  afterEach(() => jest.restoreAllMocks());

  /** What a restart without persistence does to this suite's keys: every one is gone. */
  async function restartEmpty(): Promise<void> {
    const keys = await t.redis.keys(`${t.store.hot.keys.prefix}*`);
    if (keys.length) await t.redis.del(...keys);
  }

  /**
   * The refill's durable read answers what MySQL held before `write`; then `write` runs whole
   * (MySQL, then Redis), and Redis restarts empty before the refill reaches it.
   */
  function writeAfterRead(
    method: 'get' | 'getList',
    write: () => Promise<unknown>,
    afterRestart: () => Promise<unknown> = async () => undefined,
  ) {
    const read = (t.durable[method] as (...a: unknown[]) => Promise<unknown>).bind(t.durable);
    jest.spyOn(t.durable, method).mockImplementationOnce((async (...args: unknown[]) => {
      const old = await read(...args);
      await write();
      await restartEmpty();
      await afterRestart();
      return old;
    }) as never);
  }

  it('a message list refilled from a read made before an append does not hide that append', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { n: 1 });
    await t.store.invalidate(sid);
    writeAfterRead('getList', () => t.store.append(alice, sid, 'messages', { n: 2 }));
    expect((await t.store.getList(alice, sid, 'messages')).map((i) => i.index)).toEqual([1]);
    expect((await t.store.getList(alice, sid, 'messages')).map((i) => i.index)).toEqual([1, 2]);
  });

  it('a value refilled from a read made before a save does not hide that save', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'old' });
    await t.store.invalidate(sid);
    writeAfterRead('get', () => t.store.save(alice, sid, 'conversation', { title: 'new' }));
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'old' });
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'new' });
  });

  it('a key read as absent before it was created is not marked absent after', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    writeAfterRead(
      'get',
      () => t.store.save(alice, sid, 'summary', { upTo: 30 }),
      // Another write of the session after the restart: Redis knows its owner again.
      () => t.store.save(alice, sid, 'conversation', { title: 'y' }),
    );
    expect(await t.store.get(alice, sid, 'summary')).toBeNull();
    expect(await t.store.get(alice, sid, 'summary')).toEqual({ upTo: 30 });
  });

  it('a refill with no restart in between is cached as before', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { n: 1 });
    await t.store.invalidate(sid);
    expect(await t.store.get(alice, sid, 'conversation')).toEqual({ title: 'x' });
    expect(await t.store.getList(alice, sid, 'messages')).toHaveLength(1);
    expect(await t.store.hot.get(alice, sid, 'conversation')).toEqual({ title: 'x' });
    expect(await t.store.hot.getListIfComplete(alice, sid, 'messages')).toHaveLength(1);
  });
});

describe('tiered store: more missed Redis writes than it can list', () => {
  it('drops every cached session once Redis answers again, so no stale copy is read', async () => {
    const db = await createTestDatabase();
    const prefix = createTestPrefix();
    // The cut-off connection fails at once (no offline queue), so the call time-out costs nothing
    // here; it only has to outlast a loaded machine's stalls, as one slow call of the healthy
    // saves before the cut-off (250 ms was a stall away) opened the breaker at the first failure.
    const guard = { callTimeoutMs: 2_000, failureThreshold: 1, halfOpenAfterMs: 50 };
    const stores: TieredSessionStore[] = [];
    /** A process's tiered store; its LRU is fresh, so its reads ask Redis first. */
    const open = async (redis: Redis, maxPendingInvalidations = 10) => {
      const store = new TieredSessionStore(
        new MysqlSessionStore(await openSessionDataSource({ url: db.url })),
        new RedisSessionStore(redis, prefix.prefix, { authoritative: false }),
        { ttlFor: ttlRules(DEFAULT_TTL), lruTtlMs: 0, guard, maxPendingInvalidations },
      );
      stores.push(store);
      return store;
    };
    // The writer's connection to Redis breaks for a while; it can list only 2 missed writes.
    const flaky = new Redis(TEST_REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    flaky.on('error', () => undefined);
    try {
      const writer = await open(flaky, 2);
      const scope = { tenantId: 'tenant-a' };
      const sids = Array.from({ length: 5 }, () => newId('c'));
      for (const sid of sids) await writer.save(scope, sid, 'conversation', { v: 1 });

      await cutOff(flaky);
      for (const sid of sids) await writer.save(scope, sid, 'conversation', { v: 2 });
      await flaky.connect();
      for (const sid of sids)
        // Redis still holds what the writer could not replace
        expect(await writer.hot.get(scope, sid, 'conversation')).toEqual({ v: 1 });
      await new Promise((r) => setTimeout(r, guard.halfOpenAfterMs + 20));
      // The writer's next hot read (of anything) goes to MySQL and starts dropping what it
      // missed, in the background; it trusts Redis again once that is done.
      expect(await writer.get(scope, newId('c'), 'conversation')).toBeNull();
      await writer.repaired();
      const reader = await open(new Redis(TEST_REDIS_URL));
      for (const sid of sids)
        expect(await reader.get(scope, sid, 'conversation')).toEqual({ v: 2 });
    } finally {
      await Promise.all(stores.map((s) => s.close()));
      flaky.disconnect();
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });
});

describe('tiered store: a writer that stops between its MySQL write and its Redis write', () => {
  const alice = { tenantId: 'tenant-a' };
  const DEADLINE_MS = 400;
  const HOLD_MS = 900;
  /**
   * The deadline of a killed writer's record where a test reads before it passes: that read
   * comes after the record, the writer's MySQL write and a read of its own, which a loaded
   * machine may stretch past DEADLINE_MS; a second is a margin its stalls do not outlast.
   */
  const UNDER_WAY_MS = 1_000;
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let prefix: ReturnType<typeof createTestPrefix>;
  let dataSource: Awaited<ReturnType<typeof openSessionDataSource>>;
  let durable: MysqlSessionStore;
  let redis: Redis;
  const stores: TieredSessionStore[] = [];
  /** A process's tiered store (no LRU) on the suite's database and prefix. */
  const open = (store: MysqlSessionStore = durable, extra: Partial<TieredOptions> = {}) => {
    const tiered = new TieredSessionStore(
      store,
      new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix, { authoritative: false }),
      {
        ttlFor: ttlRules(DEFAULT_TTL),
        lruTtlMs: 0,
        writeDeadlineMs: DEADLINE_MS,
        unknownWriteHoldMs: HOLD_MS,
        ...extra,
      },
    );
    stores.push(tiered);
    return tiered;
  };
  /** What a writer killed right after its MySQL commit leaves: its record in Redis, and the row. */
  const killedAppend = async (writer: TieredSessionStore, sid: string, item: unknown) => {
    await writer.hot.markWriting(
      alice,
      sid,
      'messages',
      `dead-${newId('r')}`,
      UNDER_WAY_MS,
      60_000,
    );
    return writer.durable.append(alice, sid, 'messages', item);
  };
  const texts = async (store: TieredSessionStore, sid: string) =>
    (await store.getList<{ n: number }>(alice, sid, 'messages')).map((i) => i.value.n);
  const cached = async (store: TieredSessionStore, sid: string) =>
    (await store.hot.getListIfComplete<{ n: number }>(alice, sid, 'messages'))?.map(
      (i) => i.value.n,
    ) ?? null;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  beforeAll(async () => {
    db = await createTestDatabase();
    prefix = createTestPrefix();
    dataSource = await openSessionDataSource({ url: db.url });
    durable = new MysqlSessionStore(dataSource);
    redis = new Redis(TEST_REDIS_URL);
  });
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.hot.close()));
    await durable.close();
    redis.disconnect();
    await Promise.all([db.drop(), prefix.cleanup()]);
  });

  it('a message list cached whole is read with the killed writer’s message once its deadline passes', async () => {
    const [writer, reader] = [open(), open()];
    const sid = newId('c');
    await writer.save(alice, sid, 'conversation', { title: 'x' });
    await writer.append(alice, sid, 'messages', { n: 1 });
    await writer.append(alice, sid, 'messages', { n: 2 });
    expect(await texts(reader, sid)).toEqual([1, 2]);
    expect(await cached(reader, sid)).toEqual([1, 2]);

    expect(await killedAppend(writer, sid, { n: 3 })).toBe(3);
    // Until the deadline the write may still be under way: its caller has had no answer yet.
    expect(await texts(reader, sid)).toEqual([1, 2]);
    await sleep(UNDER_WAY_MS + 100);
    expect(await texts(reader, sid)).toEqual([1, 2, 3]);
    expect(await reader.listLength(alice, sid, 'messages')).toBe(3);
    expect(await cached(reader, sid)).toEqual([1, 2, 3]); // refilled, and trusted again
    expect(await redis.exists(writer.hot.keys.writing(sid, 'messages'))).toBe(0);
  });

  it('a value cached in Redis is read as the killed writer saved it once its deadline passes', async () => {
    const [writer, reader] = [open(), open()];
    const sid = newId('c');
    await writer.save(alice, sid, 'conversation', { title: 'first' });
    expect(await reader.get(alice, sid, 'conversation')).toEqual({ title: 'first' });

    await writer.hot.markWriting(alice, sid, 'conversation', 'dead-writer', UNDER_WAY_MS, 60_000);
    await writer.durable.save(alice, sid, 'conversation', { title: 'second' });
    expect(await reader.get(alice, sid, 'conversation')).toEqual({ title: 'first' });
    await sleep(UNDER_WAY_MS + 100);
    expect(await reader.get(alice, sid, 'conversation')).toEqual({ title: 'second' });
    expect(await reader.hot.get(alice, sid, 'conversation')).toEqual({ title: 'second' });
  });

  it('no refill caches a list while a write of it is under way: it may have read MySQL before that commit', async () => {
    const [writer, reader] = [open(), open()];
    const sid = newId('c');
    await writer.save(alice, sid, 'conversation', { title: 'x' });
    await writer.append(alice, sid, 'messages', { n: 1 });
    await reader.hot.purge(sid, 'messages');
    await writer.hot.markWriting(alice, sid, 'messages', 'slow-writer', 10_000, 60_000);
    await writer.durable.append(alice, sid, 'messages', { n: 2 });

    expect(await texts(reader, sid)).toEqual([1, 2]); // from MySQL
    expect(await cached(reader, sid)).toBeNull();
    await writer.hot.endWriting(sid, 'messages', 'slow-writer');
    expect(await texts(reader, sid)).toEqual([1, 2]);
    expect(await cached(reader, sid)).toEqual([1, 2]);
  });

  it('a write that fails without saying whether it committed drops the cached list and keeps it uncached for the hold', async () => {
    /** MySQL commits the append, then the statement's time-out answers first (UNAVAILABLE). */
    class CommitsThenTimesOut extends MysqlSessionStore {
      override async append(
        scope: StoreScope,
        sid: string,
        key: string,
        item: unknown,
        opts?: AppendOptions,
      ): Promise<number> {
        await super.append(scope, sid, key, item, opts);
        throw new LoomError(LoomErrorCode.UNAVAILABLE, 'the durable store did not answer in 10 ms');
      }
    }
    const writer = open(new CommitsThenTimesOut(dataSource));
    const reader = open();
    const sid = newId('c');
    await reader.save(alice, sid, 'conversation', { title: 'x' });
    await reader.append(alice, sid, 'messages', { n: 1 });
    expect(await texts(reader, sid)).toEqual([1]);
    expect(await cached(reader, sid)).toEqual([1]);

    await expect(writer.append(alice, sid, 'messages', { n: 2 })).rejects.toMatchObject({
      code: LoomErrorCode.UNAVAILABLE,
    });
    expect(await cached(reader, sid)).toBeNull();
    expect(await texts(reader, sid)).toEqual([1, 2]);
    expect(await cached(reader, sid)).toBeNull(); // not refilled while the statement may still land
    await sleep(HOLD_MS + 100);
    expect(await texts(reader, sid)).toEqual([1, 2]);
    expect(await cached(reader, sid)).toEqual([1, 2]);
  });

  it('a save paused past its deadline, its key deleted meanwhile, does not put the key back in Redis', async () => {
    // An agent stopped (SIGSTOP) after its agent session's MySQL commit; its task completed and
    // removed the session, and the deletion's tombstone lapsed before the agent woke up.
    const tombstone = { deleteTombstoneMs: DEADLINE_MS / 2 };
    const [agent, orchestrator] = [open(durable, tombstone), open(durable, tombstone)];
    const sid = newId('c');
    const key = 'agent:a_paused12';
    await orchestrator.save(alice, sid, 'conversation', { title: 'x' });
    const write = durable.save.bind(durable);
    jest.spyOn(durable, 'save').mockImplementationOnce(async (...args) => {
      await write(...args); // the execution's write passed its guard in MySQL
      expect(await orchestrator.deleteKeys(alice, sid, [key])).toBe(true); // the task's cleanup
      await sleep(DEADLINE_MS + 100); // the agent is paused past its deadline and the tombstone
    });
    await agent.save(alice, sid, key, { status: 'COMPLETED' });
    jest.restoreAllMocks();
    expect(await durable.get(alice, sid, key)).toBeNull();
    expect(await redis.exists(agent.hot.keys.value(sid, key))).toBe(0);
    expect(await orchestrator.get(alice, sid, key)).toBeNull();
  });

  it('an append paused past its deadline, its conversation deleted meanwhile, puts nothing back in Redis', async () => {
    // A process stopped (SIGSTOP) after its append's MySQL commit; the conversation was deleted
    // and the deletion's tombstone lapsed before the process woke up.
    const tombstone = { deleteTombstoneMs: DEADLINE_MS / 2 };
    const [writer, deleter] = [open(durable, tombstone), open(durable, tombstone)];
    const sid = newId('c');
    await deleter.save(alice, sid, 'conversation', { title: 'x' });
    await writer.append(alice, sid, 'messages', { n: 1 });
    const append = durable.append.bind(durable);
    jest.spyOn(durable, 'append').mockImplementationOnce(async (...args) => {
      const index = await append(...args); // the append reached MySQL
      await deleter.delete(alice, sid); // then the conversation was deleted, rows and copies
      await sleep(DEADLINE_MS + 100); // the writer is paused past its deadline and the tombstone
      return index;
    });
    expect(await writer.append(alice, sid, 'messages', { n: 2 })).toBe(2);
    jest.restoreAllMocks();
    expect(await durable.getList(alice, sid, 'messages')).toEqual([]);
    expect(await redis.exists(writer.hot.keys.list(sid, 'messages'))).toBe(0);
    expect(await redis.exists(writer.hot.keys.meta(sid))).toBe(0);
    expect(await deleter.getList(alice, sid, 'messages')).toEqual([]);
  });

  it('a refill that read an agent session before its deletion, paused past the tombstone, does not cache it', async () => {
    // A plain read (agentMessages) missed Redis and read MySQL; its process was stopped before the
    // refill while the task closed and removed the agent session, and woke after the tombstone
    // lapsed; the conversation's refill epoch lives on meanwhile (its other reads renew it).
    const tombstone = { deleteTombstoneMs: 200 };
    const [reader, orchestrator] = [open(durable, tombstone), open(durable, tombstone)];
    const sid = newId('c');
    const key = 'agent:a_refill12';
    await orchestrator.save(alice, sid, 'conversation', { title: 'x' });
    await orchestrator.save(alice, sid, key, { status: 'COMPLETED' });
    await orchestrator.invalidate(sid);
    const read = durable.get.bind(durable);
    jest.spyOn(durable, 'get').mockImplementationOnce(async (...args) => {
      const old = await read(...args);
      expect(await orchestrator.deleteKeys(alice, sid, [key])).toBe(true); // the task's cleanup
      await sleep(400); // the reader is paused past the tombstone
      return old;
    });
    expect(await reader.get(alice, sid, key)).toEqual({ status: 'COMPLETED' });
    jest.restoreAllMocks();
    expect(await redis.exists(reader.hot.keys.value(sid, key))).toBe(0);
    expect(await orchestrator.get(alice, sid, key)).toBeNull();
  });

  it('a save begun while the breaker was open, paused past its deadline, does not put a deleted key back', async () => {
    // As above, but the breaker was open when the save began (no token recorded in Redis) and
    // had closed again by the time the agent woke up.
    const tombstone = { deleteTombstoneMs: DEADLINE_MS / 2 };
    const [agent, orchestrator] = [open(durable, tombstone), open(durable, tombstone)];
    const sid = newId('c');
    const key = 'agent:a_breaker1';
    await orchestrator.save(alice, sid, 'conversation', { title: 'x' });
    jest.spyOn(agent.guard, 'isOpen', 'get').mockReturnValueOnce(true);
    const write = durable.save.bind(durable);
    jest.spyOn(durable, 'save').mockImplementationOnce(async (...args) => {
      await write(...args);
      expect(await orchestrator.deleteKeys(alice, sid, [key])).toBe(true);
      await sleep(DEADLINE_MS + 100);
    });
    await agent.save(alice, sid, key, { status: 'COMPLETED' });
    jest.restoreAllMocks();
    expect(await durable.get(alice, sid, key)).toBeNull();
    expect(await redis.exists(agent.hot.keys.value(sid, key))).toBe(0);
    expect(await orchestrator.get(alice, sid, key)).toBeNull();
  });

  it('an append made while its process’s breaker is open is read by every process at once', async () => {
    // The breaker opened on time-outs (a busy event loop) while Redis still answers the others:
    // the append's Redis half is not sent, and this process alone knows its list copy is short.
    const guard = { ...DEFAULT_GUARD, halfOpenAfterMs: 300 };
    // A deadline no wait below reaches: the record ends with the writer's repair, not by lapsing.
    const writer = open(durable, { guard, writeDeadlineMs: 60_000, repairRetryMs: 60_000 });
    const reader = open();
    const sid = newId('c');
    await writer.save(alice, sid, 'conversation', { title: 'x' });
    await writer.append(alice, sid, 'messages', { n: 1 });
    await writer.append(alice, sid, 'messages', { n: 2 });
    expect(await texts(reader, sid)).toEqual([1, 2]);
    expect(await cached(reader, sid)).toEqual([1, 2]);
    for (let i = 0; i < DEFAULT_GUARD.failureThreshold; i++)
      await writer.guard.attempt(() => Promise.reject(new Error('timed out')));
    expect(writer.guard.isOpen).toBe(true);

    expect(await writer.append(alice, sid, 'messages', { n: 3 })).toBe(3);
    expect(writer.guard.isOpen).toBe(true); // its Redis half was not sent
    expect(await cached(reader, sid)).toBeNull();
    expect(await texts(reader, sid)).toEqual([1, 2, 3]);
    expect(await reader.listLength(alice, sid, 'messages')).toBe(3);
    expect(await cached(reader, sid)).toBeNull(); // not refilled while the write's record lasts

    // Once the writer reaches Redis again, its repair ends that record: the list is cached again.
    await sleep(guard.halfOpenAfterMs + 100);
    expect(await writer.dropMissedHotCopies()).toEqual([]);
    expect(await texts(reader, sid)).toEqual([1, 2, 3]);
    expect(await cached(reader, sid)).toEqual([1, 2, 3]);
    expect(await redis.exists(writer.hot.keys.writing(sid, 'messages'))).toBe(0);
  });

  it('a refill that read MySQL before a breaker-open append, landing after the writer’s repair, does not cache without it', async () => {
    const guard = { ...DEFAULT_GUARD, halfOpenAfterMs: 300 };
    const writer = open(durable, { guard, writeDeadlineMs: 60_000, repairRetryMs: 60_000 });
    const readerDurable = new MysqlSessionStore(dataSource);
    const reader = open(readerDurable);
    const sid = newId('c');
    await writer.save(alice, sid, 'conversation', { title: 'x' });
    await writer.append(alice, sid, 'messages', { n: 1 });
    await writer.append(alice, sid, 'messages', { n: 2 });
    await reader.hot.purge(sid, 'messages'); // cold: the reader's next read refills it
    for (let i = 0; i < DEFAULT_GUARD.failureThreshold; i++)
      await writer.guard.attempt(() => Promise.reject(new Error('timed out')));

    // The reader's refill reads MySQL; then the writer appends (its breaker open: the record is
    // sent, the Redis half is not), reaches Redis again and repairs, ending that record; only
    // then does the refill reach Redis, with a read that lacks the append.
    const read = readerDurable.getList.bind(readerDurable);
    jest.spyOn(readerDurable, 'getList').mockImplementationOnce((async (...args: unknown[]) => {
      const before = await (read as (...a: unknown[]) => Promise<unknown>)(...args);
      expect(await writer.append(alice, sid, 'messages', { n: 3 })).toBe(3);
      await sleep(guard.halfOpenAfterMs + 100);
      expect(await writer.dropMissedHotCopies()).toEqual([]);
      expect(await redis.exists(writer.hot.keys.writing(sid, 'messages'))).toBe(0);
      return before;
    }) as never);
    expect(await texts(reader, sid)).toEqual([1, 2]); // read before the append was acknowledged
    expect(await cached(reader, sid)).toBeNull(); // refused: the repair ended its epoch
    expect(await texts(reader, sid)).toEqual([1, 2, 3]);
    expect(await cached(reader, sid)).toEqual([1, 2, 3]);
  });

  it('deleting the session removes the records of its writes, a dead writer’s included', async () => {
    const store = open();
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { title: 'x' });
    await store.append(alice, sid, 'messages', { n: 1 });
    await killedAppend(store, sid, { n: 2 });
    expect(await redis.exists(store.hot.keys.writing(sid, 'messages'))).toBe(1);
    await store.delete(alice, sid);
    expect(await redis.exists(store.hot.keys.writing(sid, 'messages'))).toBe(0);
    expect(await store.getList(alice, sid, 'messages')).toEqual([]);
  });

  it('ordinary writes, and writes that fail outright, leave no record of themselves in Redis', async () => {
    const store = open();
    const sid = newId('c');
    await store.save(alice, sid, 'conversation', { title: 'x' });
    expect(await store.create(alice, sid, 'conversation', { title: 'y' })).toBe(false);
    await store.append(alice, sid, 'messages', { n: 1 });
    await expect(
      store.append(alice, sid, 'messages', { n: 9 }, { index: 1 }),
    ).rejects.toMatchObject({ code: LoomErrorCode.CONFLICT });
    expect(await redis.keys(`${prefix.prefix}*_writing*`)).toEqual([]);
    expect(await texts(store, sid)).toEqual([1]);
    expect(await cached(store, sid)).toEqual([1]); // refilled: no write of it is under way
  });
});

describe('tiered store: deleting keys while Redis fails', () => {
  it('says the cached copies may remain (false), having removed the rows from MySQL', async () => {
    const db = await createTestDatabase();
    const prefix = createTestPrefix();
    const flaky = new Redis(TEST_REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    flaky.on('error', () => undefined);
    const store = new TieredSessionStore(
      new MysqlSessionStore(await openSessionDataSource({ url: db.url })),
      new RedisSessionStore(flaky, prefix.prefix, { authoritative: false }),
      { ttlFor: ttlRules(DEFAULT_TTL), lruTtlMs: 0 },
    );
    const scope = { tenantId: 'tenant-a' };
    try {
      const sid = newId('c');
      await store.save(scope, sid, 'conversation', { title: 'x' });
      await store.save(scope, sid, 'agent:a_one12345', { notes: 1 });
      await cutOff(flaky);
      expect(await store.deleteKeys(scope, sid, ['agent:a_one12345'])).toBe(false);
      expect(await store.durable.get(scope, sid, 'agent:a_one12345')).toBeNull();
      await flaky.connect();
      // The copy is still in Redis: only this process knows to drop it.
      expect(await store.hot.get(scope, sid, 'agent:a_one12345')).toEqual({ notes: 1 });
    } finally {
      await store.close();
      flaky.disconnect();
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });
  // A deletion whose tombstones could not be written (Redis paused or cut off) is repaired once
  // Redis answers; the repair must leave the tombstones too, or the Redis half of a write that
  // passed MySQL before the deletion (an agent's last save of its session) lands after the
  // repair and caches a key MySQL no longer holds (chaos: "agent session key left in Redis").
  it('repairs a deletion it could not make in Redis with its tombstones, so a late save is refused', async () => {
    const db = await createTestDatabase();
    const prefix = createTestPrefix();
    const flaky = new Redis(TEST_REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    flaky.on('error', () => undefined);
    const open = async (redis: Redis) =>
      new TieredSessionStore(
        new MysqlSessionStore(await openSessionDataSource({ url: db.url })),
        new RedisSessionStore(redis, prefix.prefix, { authoritative: false }),
        { ttlFor: ttlRules(DEFAULT_TTL), lruTtlMs: 0 },
      );
    const orchestrator = await open(flaky);
    const agent = await open(new Redis(TEST_REDIS_URL));
    const scope = { tenantId: 'tenant-a' };
    const key = 'agent:a_late5678';
    try {
      const sid = newId('c');
      await orchestrator.save(scope, sid, 'conversation', { title: 'x' });
      await agent.save(scope, sid, key, { status: 'RUNNING' });
      await cutOff(flaky);
      expect(await orchestrator.deleteKeys(scope, sid, [key])).toBe(false);
      await flaky.connect();
      // Redis answers again: a hot write that succeeds starts the repair, which drops the copy.
      for (let i = 0; (await agent.hot.get(scope, sid, key)) !== null; i++) {
        if (i === 50) throw new Error('the repair never dropped the cached copy');
        await orchestrator.save(scope, sid, 'conversation', { title: `y${i}` });
        await orchestrator.repaired();
        await new Promise((r) => setTimeout(r, 100));
      }
      // The agent's last save had passed MySQL before the deletion; its Redis half comes now.
      jest.spyOn(agent.durable, 'save').mockResolvedValueOnce(undefined);
      await agent.save(scope, sid, key, { status: 'COMPLETED' });
      expect(await agent.hot.get(scope, sid, key)).toBeNull();
      expect(await agent.get(scope, sid, key)).toBeNull();
    } finally {
      await Promise.all([orchestrator.close(), agent.close()]);
      flaky.disconnect();
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });
});

describe('tiered store: what a process trusts from its own LRU', () => {
  const alice = { tenantId: 'tenant-a' };
  let stores: TieredSessionStore[];
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase();
    const prefix = createTestPrefix();
    /** Two processes' stores, each trusting its LRU for a minute. */
    const open = async () =>
      new TieredSessionStore(
        new MysqlSessionStore(await openSessionDataSource({ url: db.url })),
        new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix, { authoritative: false }),
        { ttlFor: ttlRules(DEFAULT_TTL), lruTtlMs: 60_000 },
      );
    stores = [await open(), await open()];
    cleanup = async () => {
      await Promise.all(stores.map((s) => s.close()));
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup());

  it('reads the summary from Redis every time: another process rewrites it between turns', async () => {
    const [agent, orchestrator] = stores;
    const sid = newId('c');
    await orchestrator.save(alice, sid, 'conversation', { title: 'first' });
    await orchestrator.save(alice, sid, 'summary', { text: 'first', toSeq: 12 });
    expect(await agent.get(alice, sid, 'conversation')).toEqual({ title: 'first' });
    expect(await agent.get(alice, sid, 'summary')).toEqual({ text: 'first', toSeq: 12 });

    await orchestrator.save(alice, sid, 'conversation', { title: 'second' });
    await orchestrator.save(alice, sid, 'summary', { text: 'second', toSeq: 14 });
    // Within its LRU time the agent keeps its copy of an ordinary value, not of the summary.
    expect(await agent.get(alice, sid, 'conversation')).toEqual({ title: 'first' });
    expect(await agent.get(alice, sid, 'summary')).toEqual({ text: 'second', toSeq: 14 });
  });
});

describe('tiered store: hot lifetimes of lists (seed 000 layered TTLs)', () => {
  const alice = { tenantId: 'tenant-a' };

  const t = tieredSuite();

  it('a read of the message log slides its hot TTL like the conversation; a task list does not slide', async () => {
    const sid = newId('c');
    const week = DEFAULT_TTL.conversationSeconds * 1000;
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    await t.store.append(alice, sid, 'messages', { content: 'hi' });
    await t.store.append(alice, sid, 'task:t_abcdefgh:shared', { key: 'k' });
    // Read once: the refill marks both lists complete, so the reads below are hot hits.
    await t.store.getList(alice, sid, 'messages');
    await t.store.getList(alice, sid, 'task:t_abcdefgh:shared');
    // Six days on, nobody wrote: what is left of each key's hot lifetime.
    await t.redis.pexpire(t.hot.keys.list(sid, 'messages'), 86_400_000);
    await t.redis.pexpire(t.hot.keys.list(sid, 'task:t_abcdefgh:shared'), 60_000);

    expect(await t.store.getList(alice, sid, 'messages')).toHaveLength(1);
    expect(await t.store.getList(alice, sid, 'task:t_abcdefgh:shared')).toHaveLength(1);

    expect(await t.redis.pttl(t.hot.keys.list(sid, 'messages'))).toBeGreaterThan(week - 60_000);
    expect(await t.redis.pttl(t.hot.keys.list(sid, 'task:t_abcdefgh:shared'))).toBeLessThanOrEqual(
      60_000,
    );
  });
});

describe('tiered store: a cold read of a long list', () => {
  const alice = { tenantId: 'tenant-a' };

  const t = tieredSuite();
  afterEach(() => jest.restoreAllMocks());

  it('answers a range and refills Redis 200 items a call, marking it complete with the last', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    for (let n = 1; n <= 450; n++) await t.store.durable.append(alice, sid, 'messages', { n });
    const fills = jest.spyOn(t.hot, 'fillList');
    const newest = await t.store.getList<{ n: number }>(alice, sid, 'messages', { last: 50 });
    expect(newest.map((i) => i.index)).toEqual(Array.from({ length: 50 }, (_, k) => 401 + k));
    expect(fills.mock.calls.map(([, , , items, , complete]) => [items.length, complete])).toEqual([
      [200, false],
      [200, false],
      [50, true],
    ]);
    const cached = await t.hot.getListIfComplete(alice, sid, 'messages');
    expect(cached?.map((i) => i.index)).toEqual(Array.from({ length: 450 }, (_, k) => k + 1));
  });

  it('runs one refill of a list at a time: readers that miss meanwhile read MySQL alone', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    for (let n = 1; n <= 450; n++) await t.store.durable.append(alice, sid, 'messages', { n });
    const fills = jest.spyOn(t.hot, 'fillList');
    const reads = await Promise.all(
      Array.from({ length: 5 }, () => t.store.getList(alice, sid, 'messages', { last: 2 })),
    );
    expect(reads.map((r) => r.map((i) => i.index))).toEqual(Array(5).fill([449, 450]));
    expect(fills.mock.calls.map(([, , , items]) => items.length)).toEqual([200, 200, 50]);
    expect((await t.hot.getListIfComplete(alice, sid, 'messages'))?.length).toBe(450);
  });

  it('answers a range from its own read when the refill beside it fails midway, and refills later', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    for (let n = 1; n <= 450; n++) await t.store.durable.append(alice, sid, 'messages', { n });
    const read = t.store.durable.getList.bind(t.store.durable);
    // The refill's second page meets a MySQL failure (a statement time-out, say).
    jest.spyOn(t.store.durable, 'getList').mockImplementation(async (scope, id, key, range) => {
      if (range?.afterIndex === 200 && range.limit === 200) throw new Error('query timed out');
      return read(scope, id, key, range);
    });

    const newest = await t.store.getList<{ n: number }>(alice, sid, 'messages', { last: 2 });

    expect(newest.map((i) => i.index)).toEqual([449, 450]);
    expect(await t.hot.getListIfComplete(alice, sid, 'messages')).toBeNull();
    jest.restoreAllMocks();
    expect(
      (await t.store.getList(alice, sid, 'messages', { last: 2 })).map((i) => i.index),
    ).toEqual([449, 450]);
    expect((await t.hot.getListIfComplete(alice, sid, 'messages'))?.length).toBe(450);
  });

  it('splits a page of long items into Redis calls of about 1 MB; a fill cut off midway stays a miss', async () => {
    const sid = newId('c');
    await t.store.save(alice, sid, 'conversation', { title: 'x' });
    const items = Array.from({ length: 5 }, (_, k) => ({
      index: k + 1,
      value: 'x'.repeat(400_000),
    }));
    const lua = jest.spyOn(hotClient(t.hot), 'loomFILL_LIST');
    expect(await t.hot.fillList(alice, sid, 'messages', items.slice(0, 4), 60, false)).toBe(true);
    expect(await t.hot.getListIfComplete(alice, sid, 'messages')).toBeNull();
    expect(await t.hot.fillList(alice, sid, 'messages', items.slice(4), 60, true)).toBe(true);
    // [1, 2] and [3, 4] (800 KB each), then [5] with the sentinel.
    // Arguments: numkeys, 7 keys, tenant, key, complete flag, ttl, epoch and the time of its miss
    // (none: called directly, not by a refill), then index/member pairs.
    expect(lua.mock.calls.map((c) => [(c.length - 14) / 2, c[10]])).toEqual([
      [2, ''],
      [2, ''],
      [1, '1'],
    ]);
    expect((await t.hot.getListIfComplete(alice, sid, 'messages'))?.length).toBe(5);
  });
});

/** The ioredis client behind a store (its Lua commands are defined on it). */
function hotClient(store: RedisSessionStore): Record<string, (...a: unknown[]) => unknown> {
  return (store as unknown as { redis: Record<string, (...a: unknown[]) => unknown> }).redis;
}

describe("tiered store: the LRU's copies once they are stale", () => {
  const alice = { tenantId: 'tenant-a' };
  let store: TieredSessionStore;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase();
    const prefix = createTestPrefix();
    store = new TieredSessionStore(
      new MysqlSessionStore(await openSessionDataSource({ url: db.url })),
      new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix, { authoritative: false }),
      { ttlFor: ttlRules(DEFAULT_TTL), lruTtlMs: 50 },
    );
    cleanup = async () => {
      await store.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup());

  it('lets go of them: a burst over many conversations is not held once the process is idle', async () => {
    // A task session carries its executions' answers (up to 100,000 characters each): ten
    // thousand of them kept by an idle process is gigabytes, of copies it may no longer serve.
    const answer = 'x'.repeat(10_000);
    const sids = Array.from({ length: 200 }, () => newId('c'));
    for (const sid of sids) await store.save(alice, sid, 'conversation', { answer });
    for (const sid of sids) expect(await store.get(alice, sid, 'conversation')).toEqual({ answer });
    const lru = (store as unknown as { lru: { size: number } }).lru;
    expect(lru.size).toBeGreaterThan(0);
    // Stale after 50 ms: gone within a few seconds, without a read or write to push them out.
    const until = Date.now() + 5_000;
    while (lru.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    expect(lru.size).toBe(0);
  });
});
