import {
  createTestDatabase,
  FreezableTcpProxy,
  ProxiedRedis,
  sleep,
  startProxiedRedis,
} from '@loom/testing';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { newId } from '../../ids';
import { createRedis } from '../../session.providers';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { RedisSessionStore } from '../redis/redis-session.store';
import { ListItem } from '../session-store';
import { TieredOptions, TieredSessionStore } from './tiered-session.store';

/**
 * Two processes' tiered stores over one MySQL and one Redis; the writer's Redis connection goes
 * through a proxy the test freezes, so its appends commit in MySQL while nothing of them (neither
 * the record of the write nor its Redis half) reaches Redis, and the reader reaches Redis all
 * along. The writer never repairs here (cut off for good, as one killed while cut off): the
 * reader used to serve its list cached whole without the writer's acknowledged messages for the
 * list's hot TTL, which a conversation's reads keep sliding. A list cached whole is now checked
 * against MySQL's length once it was last checked `listVerifyMs` ago, which bounds that.
 */
describe('tiered store: a writer cut off from Redis while the others reach it (MySQL, Redis)', () => {
  const VERIFY_MS = 1000;
  const scope = { tenantId: newId('t') };
  const prefix = 'loomcutoff:';
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let proxied: ProxiedRedis;
  let reader: TieredSessionStore;
  const stores: TieredSessionStore[] = [];

  async function tiered(redisUrl: string, mysqlUrl = db.url): Promise<TieredSessionStore> {
    const durable = new MysqlSessionStore(await openSessionDataSource({ url: mysqlUrl }));
    const hot = new RedisSessionStore(createRedis(redisUrl, 'cut-off-writer'), prefix, {
      authoritative: false,
    });
    const options: TieredOptions = {
      ttlFor: ttlRules(DEFAULT_TTL),
      lruTtlMs: 0,
      // The breaker stays closed and the writer does not try its repair within a test; a call
      // times out only when cut off, not on a machine busy with other suites.
      guard: { callTimeoutMs: 1000, failureThreshold: 3, halfOpenAfterMs: 60_000 },
      repairRetryMs: 60_000,
      listVerifyMs: VERIFY_MS,
    };
    const store = new TieredSessionStore(durable, hot, options);
    stores.push(store);
    return store;
  }

  const values = async (store: TieredSessionStore, sid: string) =>
    (await store.getList<{ n: number }>(scope, sid, 'messages')).map((i) => i.value.n);
  const cached = async (sid: string) =>
    (await reader.hot.getListIfComplete<{ n: number }>(scope, sid, 'messages'))?.map(
      (i) => i.value.n,
    ) ?? null;

  /**
   * The list as the reader's Redis holds it once a read has cached it whole. On a machine busy
   * with other suites, a call of the writer's may outlast its guard's 1 s: its record of the
   * write then keeps refills out until the write's deadline, and the first reads are MySQL's.
   */
  async function cachedWhole(sid: string): Promise<number[] | null> {
    for (const until = Date.now() + 30_000; Date.now() < until; await sleep(200)) {
      await values(reader, sid);
      const found = await cached(sid);
      if (found) return found;
    }
    return null;
  }

  /** Runs `write` on a writer whose Redis connection is frozen, then lets its bytes die. */
  async function cutOff<T>(write: () => Promise<T>): Promise<T> {
    proxied.proxy.freeze();
    try {
      return await write();
    } finally {
      proxied.proxy.sever();
      proxied.proxy.thaw();
    }
  }

  beforeAll(async () => {
    db = await createTestDatabase('loom_cutoff');
    proxied = await startProxiedRedis();
    reader = await tiered(proxied.redis.url);
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(async () => {
    await proxied?.stop(...stores.map((s) => s.close()));
    await db?.drop();
  });

  it('a list cached whole before the writer was cut off is read with its append once the check is due', async () => {
    const writer = await tiered(proxied.proxiedUrl);
    const sid = newId('c');
    await writer.save(scope, sid, 'conversation', { title: 'x' });
    await writer.append(scope, sid, 'messages', { n: 1 });
    await writer.append(scope, sid, 'messages', { n: 2 });
    expect(await values(reader, sid)).toEqual([1, 2]);
    expect(await cachedWhole(sid)).toEqual([1, 2]);

    expect(await cutOff(() => writer.append(scope, sid, 'messages', { n: 3 }))).toBe(3);
    await sleep(VERIFY_MS + 100);
    expect(await values(reader, sid)).toEqual([1, 2, 3]);
    expect(await reader.listLength(scope, sid, 'messages')).toBe(3);
    expect(await values(reader, sid)).toEqual([1, 2, 3]);
    expect(await cached(sid)).toEqual([1, 2, 3]); // cached again, checked
  });

  it('a refill that read MySQL before the cut-off writer’s append is read with it once the check is due', async () => {
    const writer = await tiered(proxied.proxiedUrl);
    const sid = newId('c');
    await writer.save(scope, sid, 'conversation', { title: 'x' });
    await writer.append(scope, sid, 'messages', { n: 1 });
    await writer.append(scope, sid, 'messages', { n: 2 });
    const read = reader.durable.getList.bind(reader.durable);
    jest.spyOn(reader.durable, 'getList').mockImplementationOnce((async (...args: unknown[]) => {
      const before = (await (read as (...a: unknown[]) => Promise<unknown>)(...args)) as ListItem[];
      expect(await cutOff(() => writer.append(scope, sid, 'messages', { n: 3 }))).toBe(3);
      return before;
    }) as never);
    expect(await values(reader, sid)).toEqual([1, 2]); // read before the append was acknowledged
    await sleep(VERIFY_MS + 100);
    expect(await reader.listLength(scope, sid, 'messages')).toBe(3);
    expect(await values(reader, sid)).toEqual([1, 2, 3]);
  });

  // The check made a hot list's read need MySQL: with MySQL out of reach, every read of one
  // became a 503 once its check was due, where Redis had served it.
  it('a list whose check is due is served from Redis while MySQL is out of reach', async () => {
    const url = new URL(db.url);
    const mysql = await FreezableTcpProxy.start({ host: url.hostname, port: Number(url.port) });
    url.port = String(mysql.port);
    const cutFromMysql = await tiered(proxied.redis.url, url.toString());
    const sid = newId('c');
    await reader.save(scope, sid, 'conversation', { title: 'x' });
    await reader.append(scope, sid, 'messages', { n: 1 });
    await reader.append(scope, sid, 'messages', { n: 2 });
    expect(await values(reader, sid)).toEqual([1, 2]);
    expect(await cachedWhole(sid)).toEqual([1, 2]);
    await sleep(VERIFY_MS + 100);
    await mysql.close(); // refused from now on, and the pool's connections gone
    expect(await values(cutFromMysql, sid)).toEqual([1, 2]);
    expect(await values(cutFromMysql, sid)).toEqual([1, 2]);
    // What needs MySQL still says so.
    await expect(cutFromMysql.listLength(scope, sid, 'messages', true)).rejects.toMatchObject({
      code: 'UNAVAILABLE',
    });
    expect(await cached(sid)).toEqual([1, 2]);
  });

  it('a list the check finds whole stays cached and is served from Redis', async () => {
    const sid = newId('c');
    await reader.save(scope, sid, 'conversation', { title: 'x' });
    await reader.append(scope, sid, 'messages', { n: 1 });
    expect(await values(reader, sid)).toEqual([1]);
    await sleep(VERIFY_MS + 100);
    const durableReads = jest.spyOn(reader.durable, 'getList');
    const durableLengths = jest.spyOn(reader.durable, 'listLength');
    expect(await values(reader, sid)).toEqual([1]); // checked: MySQL's last index, not its items
    expect(await values(reader, sid)).toEqual([1]); // stamped checked by the read before
    expect(await reader.listLength(scope, sid, 'messages')).toBe(1);
    expect(durableReads).not.toHaveBeenCalled();
    expect(durableLengths).toHaveBeenCalledTimes(1);
    expect(await cached(sid)).toEqual([1]);
  });
});
