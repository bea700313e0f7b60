import { createTestDatabase, ProxiedRedis, sleep, startProxiedRedis } from '@loom/testing';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { newId } from '../../ids';
import { createRedis } from '../../session.providers';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { RedisSessionStore } from '../redis/redis-session.store';
import { TieredSessionStore } from './tiered-session.store';

/**
 * Two processes' tiered stores over one MySQL and one Redis, process B's Redis connection
 * through a proxy the test cuts. The Redis half of B's append is lost while A still reaches
 * Redis: A's cached copy of the list lacks an acknowledged write until B drops it. B used to drop
 * it only on its own next Redis call, so a process that went idle (an agent whose execution was
 * over) left every other process serving the list without that write for its whole hot TTL (a
 * task's shared writes: 24 h), the orchestrator included.
 */
describe('tiered store: a missed hot write is repaired by an idle process (MySQL, Redis)', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let proxied: ProxiedRedis;
  let a: TieredSessionStore;
  let b: TieredSessionStore;
  const prefix = 'loomidlerepair:';
  const scope = { tenantId: newId('t') };

  async function tiered(redisUrl: string): Promise<TieredSessionStore> {
    const durable = new MysqlSessionStore(await openSessionDataSource({ url: db.url }));
    const hot = new RedisSessionStore(createRedis(redisUrl, 'idle-repair'), prefix, {
      authoritative: false,
    });
    return new TieredSessionStore(durable, hot, {
      ttlFor: ttlRules(DEFAULT_TTL),
      lruTtlMs: 0,
      guard: { callTimeoutMs: 300, failureThreshold: 3, halfOpenAfterMs: 500 },
    });
  }

  beforeAll(async () => {
    db = await createTestDatabase('loom_idlerepair');
    proxied = await startProxiedRedis();
    a = await tiered(proxied.redis.url);
    b = await tiered(proxied.proxiedUrl);
  });
  afterAll(async () => {
    await proxied?.stop(a?.close(), b?.close());
    await db?.drop();
  });

  it('another process stops serving the list without the write once Redis answers the writer again', async () => {
    const sid = newId('c');
    const key = 'task:t_idlerepair000:shared';
    await b.append(scope, sid, key, 'first');
    expect((await a.getList(scope, sid, key)).map((i) => i.value)).toEqual(['first']);

    // B's Redis stops answering: its append commits in MySQL, its Redis half times out (and the
    // bytes it sent never arrive: those connections die).
    proxied.proxy.freeze();
    expect(await b.append(scope, sid, key, 'second')).toBe(2);
    proxied.proxy.sever();
    proxied.proxy.thaw();

    // B is idle from now on. A, which reached Redis all along, must come to read the whole list.
    let values: unknown[] = [];
    for (let waited = 0; waited < 20_000; waited += 200) {
      values = (await a.getList(scope, sid, key)).map((i) => i.value);
      if (values.length === 2) break;
      await sleep(200);
    }
    expect(values).toEqual(['first', 'second']);
  });
});
