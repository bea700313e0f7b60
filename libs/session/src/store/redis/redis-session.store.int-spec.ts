import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { newId } from '../../ids';
import { runSessionStoreContract } from '../session-store.contract';
import { RedisSessionStore } from './redis-session.store';

runSessionStoreContract('redis', async () => {
  const prefix = createTestPrefix();
  const store = new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix.prefix);
  return {
    store,
    cleanup: async () => {
      await store.close();
      await prefix.cleanup();
    },
  };
});

describe('redis (standalone): a fence left alone by a deletion', () => {
  const prefix = createTestPrefix();
  const redis = new Redis(TEST_REDIS_URL);
  const store = new RedisSessionStore(redis, prefix.prefix, { ownsConnection: false });
  const scope = { tenantId: 'fence-tenant' };
  const k = store.keys;
  const HOUR = 3_600_000;
  const lapses = async (sid: string) => [
    await redis.pttl(k.meta(sid)),
    await redis.pttl(k.fence(sid)),
  ];

  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  it('keeps the owner and counter for an hour after the deletion or the last issue', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'state', 1, { fence: await store.nextFence(scope, sid) });
    expect(await lapses(sid)).toEqual([-1, -1]);
    await store.delete(scope, sid);
    for (const ms of await lapses(sid)) expect(ms > HOUR - 60_000 && ms <= HOUR).toBe(true);
    expect(await redis.exists(k.keys(sid), k.value(sid, 'state'))).toBe(0);
    await redis.pexpire(k.fence(sid), 5_000);
    await redis.pexpire(k.meta(sid), 5_000);
    expect(await store.nextFence(scope, sid)).toBe(2);
    for (const ms of await lapses(sid)) expect(ms > HOUR - 60_000).toBe(true);
  });

  it('a fence issued where nothing else is lapses; a write makes it last like its session', async () => {
    const sid = newId('c');
    const fence = await store.nextFence(scope, sid);
    for (const ms of await lapses(sid)) expect(ms > 0 && ms <= HOUR).toBe(true);
    await store.save(scope, sid, 'state', 1, { fence });
    expect(await lapses(sid)).toEqual([-1, -1]);
    const other = newId('c');
    await store.nextFence(scope, other);
    await store.delete(scope, other);
    await store.append(scope, other, 'log', 'x', { ttlSeconds: 100 });
    for (const ms of await lapses(other)) expect(ms > 90_000 && ms <= 100_000).toBe(true);
    expect(await redis.hget(k.meta(other), 'remnant')).toBeNull();
  });
});

describe('redis: TTLs of a session and its bookkeeping keys', () => {
  const prefix = createTestPrefix();
  const redis = new Redis(TEST_REDIS_URL);
  const store = new RedisSessionStore(redis, prefix.prefix, {
    authoritative: false,
    ownsConnection: false,
  });
  const scope = { tenantId: 'ttl-tenant' };
  const k = store.keys;
  /** The key's TTL in whole seconds, rounded up (-1: none, -2: no key). */
  const ttl = async (key: string) => {
    const ms = await redis.pttl(key);
    return ms < 0 ? ms : Math.ceil(ms / 1000);
  };

  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  it('a write gives its key its TTL and lengthens, never shortens, the session index and meta', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'conversation', { a: 1 }, { ttlSeconds: 100 });
    expect(await ttl(k.value(sid, 'conversation'))).toBe(100);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([100, 100]);

    await store.save(scope, sid, 'task:t_abcdefgh', { b: 1 }, { ttlSeconds: 10 });
    expect(await ttl(k.value(sid, 'task:t_abcdefgh'))).toBe(10);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([100, 100]);

    await store.append(scope, sid, 'messages', 'one', { ttlSeconds: 200 });
    expect(await ttl(k.list(sid, 'messages'))).toBe(200);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([200, 200]);

    await store.append(scope, sid, 'messages', 'two', { ttlSeconds: 50 });
    expect(await ttl(k.list(sid, 'messages'))).toBe(200);

    // A save replaces the value and its TTL with the new ones.
    await store.save(scope, sid, 'conversation', { a: 2 }, { ttlSeconds: 30 });
    expect(await ttl(k.value(sid, 'conversation'))).toBe(30);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([200, 200]);
  });

  it('a session first written without a TTL keeps none on its index and meta', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'conversation', { a: 1 });
    await store.save(scope, sid, 'summary', { s: 1 }, { ttlSeconds: 100 });
    await store.append(scope, sid, 'messages', 'one', { ttlSeconds: 100 });
    expect(await ttl(k.value(sid, 'conversation'))).toBe(-1);
    expect(await ttl(k.value(sid, 'summary'))).toBe(100);
    expect(await ttl(k.list(sid, 'messages'))).toBe(100);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([-1, -1]);
  });

  it('a sliding read extends what it read and never shortens the session index and meta', async () => {
    const sid = newId('c');
    // A task kept longer than the conversation's sliding layer (an operator's TTL rules).
    await store.save(scope, sid, 'task:t_abcdefgh', { b: 1 }, { ttlSeconds: 300 });
    await store.save(scope, sid, 'conversation', { a: 1 }, { ttlSeconds: 100 });
    await store.fillList(scope, sid, 'messages', [{ index: 1, value: 'one' }], 100);
    await redis.pexpire(k.value(sid, 'conversation'), 10_000);
    await redis.pexpire(k.list(sid, 'messages'), 10_000);

    expect(await store.get(scope, sid, 'conversation', 60)).toEqual({ a: 1 });
    expect(await ttl(k.value(sid, 'conversation'))).toBe(60);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([300, 300]);
    expect(await store.getListIfComplete(scope, sid, 'messages', {}, 60)).toEqual([
      { index: 1, value: 'one' },
    ]);
    expect(await ttl(k.list(sid, 'messages'))).toBe(60);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([300, 300]);
  });

  it('a refilled list gets its TTL, and a session the refill claims gets it on its meta', async () => {
    const sid = newId('c');
    await store.fillList(scope, sid, 'messages', [{ index: 1, value: 'one' }], 100);
    expect(await ttl(k.list(sid, 'messages'))).toBe(100);
    expect([await ttl(k.meta(sid)), await ttl(k.keys(sid))]).toEqual([100, 100]);
    expect(await store.getListIfComplete(scope, sid, 'messages')).toEqual([
      { index: 1, value: 'one' },
    ]);
  });
});

describe('redis (standalone): listing sessions updated in one millisecond', () => {
  const prefix = createTestPrefix();
  const redis = new Redis(TEST_REDIS_URL);
  const store = new RedisSessionStore(redis, prefix.prefix, { ownsConnection: false });
  const scope = { tenantId: 'list-tenant' };

  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  it('pages past more sessions of the cursor millisecond than one read takes', async () => {
    const at = Date.now();
    const ids = Array.from({ length: 130 }, (_, i) => `c_tie${String(i).padStart(4, '0')}`);
    // 130 sessions whose index entries share one millisecond (written together, or imported).
    await redis.zadd(
      store.keys.index(scope.tenantId, 'conversation'),
      ...ids.flatMap((id) => [at, id]),
    );
    const newestFirst = [...ids].reverse();
    const cursor = { updatedAt: new Date(at), sessionId: newestFirst[99] };
    const page = await store.listSessions(scope, 'conversation', { limit: 10, before: cursor });
    expect(page.map((p) => p.sessionId)).toEqual(newestFirst.slice(100, 110));
    const last = await store.listSessions(scope, 'conversation', {
      limit: 10,
      before: { updatedAt: new Date(at), sessionId: newestFirst[125] },
    });
    expect(last.map((p) => p.sessionId)).toEqual(newestFirst.slice(126));
  });
});
