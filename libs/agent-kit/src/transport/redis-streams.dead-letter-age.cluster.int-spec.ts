import { PrivateRedisCluster, sleep } from '@loom/testing';
import { RedisClient } from '@loom/session';
import { deadLetterStreamKey } from './redis-streams.options';
import { RedisStreamsServer } from './redis-streams.server';
import { fieldsToRecord } from './redis-streams.util';

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await sleep(50))
    if (await check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * The dead-letter trim and the start's removal of older versions' copies on a Redis Cluster: an
 * agent's patterns' dead-letter streams sit in different slots (hash tag `{pattern}`), each
 * trimmed by a script of its own slot (redis-streams.dead-letter-age.int-spec.ts: standalone).
 */
describe('RedisStreamsServer on a Redis Cluster: dead-letter copies kept for a bounded time', () => {
  let cluster: PrivateRedisCluster;
  let redis: RedisClient;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    redis = await cluster.client();
  }, 60_000);
  afterAll(async () => {
    redis?.disconnect();
    await cluster?.stop();
  });

  it("trims each pattern's stream in its slot, and drops the copies holding the request data", async () => {
    const keyPrefix = `deadage${Date.now()}:`;
    const patterns = ['agent.deadage1.execute', 'agent.deadage2.execute', 'agent.deadage3.health'];
    const deadKeys = patterns.map((p) => deadLetterStreamKey(keyPrefix, p));
    expect(new Set(await Promise.all(deadKeys.map((k) => cluster.portOf(k)))).size).toBeGreaterThan(
      1,
    );
    for (const key of deadKeys) {
      const [s] = await redis.time();
      await redis.xadd(key, `${(Number(s) - 120) * 1000}-0`, 'id', 'old', 'ref', '{}');
      await redis.xadd(key, '*', 'id', 'whole', 'data', '{"history":"secret"}', 'reason', 'x');
      await redis.xadd(key, '*', 'id', 'recent', 'ref', '{}', 'reason', 'x');
    }
    const server = new RedisStreamsServer({
      redisUrl: cluster.url,
      redisClusterNodes: cluster.seeds,
      keyPrefix,
      blockMs: 200,
      claimIdleMs: 200,
      deadLetterRetentionMs: 60_000,
    });
    for (const p of patterns) server.addHandler(p, async () => 'ok');
    const copies = async (key: string) =>
      (await redis.xrange(key, '-', '+')).map(([, f]) => fieldsToRecord(f).id);
    try {
      await new Promise<unknown>((resolve) => server.listen((e?: unknown) => resolve(e)));
      for (const key of deadKeys) {
        await waitFor(`${key} trimmed`, async () => (await copies(key)).length === 1);
        expect(await copies(key)).toEqual(['recent']);
        expect(await redis.pttl(key)).toBeGreaterThan(0);
      }
    } finally {
      await server.close();
    }
  }, 90_000);
});
