import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { RedisAgentRegistry } from './agent-registry';
import { registryContract, STALE_MS } from './agent-registry.contract';

/** The Redis registry on a real Redis, under a key prefix of this suite's own. */
describe('RedisAgentRegistry', () => {
  const prefix = createTestPrefix('registry');
  const redis = new Redis(TEST_REDIS_URL);
  let n = 0;
  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  describe('contract', () =>
    registryContract(
      () => new RedisAgentRegistry(redis, prefix.prefix, STALE_MS),
      () => `tax-${++n}`,
    ));

  /** The registry's keys of one agent type (the Redis key table of docs/session-library.md). */
  const typeKeys = (type: string) => {
    const instances = `${prefix.prefix}agents:{registry}:${type}`;
    return { started: `${instances}:started`, descriptors: `${instances}:descriptors` };
  };
  const descriptorOf = (agentType: string) => ({
    agentType,
    description: 'Income tax questions',
    role: 'specialist' as const,
    intents: [agentType],
    keywords: ['tax'],
  });

  // agents:retire: a retired type whose instances are gone leaves no registry key behind.
  it('forgets a type with no live instance entirely, and refuses one that still runs', async () => {
    const registry = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
    const [gone, running] = [`retired-${++n}`, `running-${++n}`];
    await registry.heartbeat(descriptorOf(gone), 'gone-1', Date.now());
    await registry.remove(gone, 'gone-1');
    await registry.heartbeat(descriptorOf(running), 'run-1', Date.now());
    expect(await registry.forget(gone)).toBe(true);
    expect(await registry.forget(running)).toBe(false);
    const { started, descriptors } = typeKeys(gone);
    const instances = `${prefix.prefix}agents:{registry}:${gone}`;
    expect(await redis.exists(instances, started, descriptors)).toBe(0);
    expect(await redis.hexists(`${prefix.prefix}agents:{registry}`, gone)).toBe(0);
    expect((await registry.live()).map((a) => a.descriptor.agentType)).toContain(running);
  });

  // Nothing beats for a type whose instances were all killed: what only its heartbeats prune
  // must expire by itself, or each such type leaves its descriptors in Redis for good.
  it('lets the start times and descriptors of a type whose instances all died expire', async () => {
    const staleMs = 100;
    const registry = new RedisAgentRegistry(redis, prefix.prefix, staleMs);
    const type = `gone-${++n}`;
    await registry.heartbeat(descriptorOf(type), 'gone-1', Date.now());
    await registry.heartbeat(descriptorOf(type), 'gone-2', Date.now());
    const { started, descriptors } = typeKeys(type);
    for (const key of [started, descriptors]) {
      const ttl = await redis.pttl(key);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(staleMs * 4);
    }
    await new Promise((r) => setTimeout(r, staleMs * 4 + 100));
    expect(await redis.exists(started, descriptors)).toBe(0);
  });

  // An agent of a version before start times prunes only the heartbeat zset: an instance it
  // forgets must leave the start times and descriptors as well, not stay there for good.
  it('forgets the start time and descriptor of an instance an older version pruned', async () => {
    const realNow = Date.now.bind(Date);
    let offset = 0;
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + offset);
    try {
      const registry = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
      const type = `mixed-${++n}`;
      const instances = `${prefix.prefix}agents:{registry}:${type}`;
      const started = Date.now();
      await registry.heartbeat(descriptorOf(type), 'new-1', started);
      await registry.heartbeat(descriptorOf(type), 'killed', started + 1);
      offset = STALE_MS * 4 + 1;
      await registry.heartbeat(descriptorOf(type), 'new-1', started); // 'killed' is forgotten
      expect(await redis.zscore(typeKeys(type).started, 'killed')).toBeNull();

      await registry.heartbeat(descriptorOf(type), 'killed-2', started + 2);
      offset = STALE_MS * 8 + 2;
      // The old version's heartbeat (its MULTI, as it was) prunes 'killed-2' from the zset.
      await redis
        .multi()
        .hset(`${prefix.prefix}agents:{registry}`, type, JSON.stringify(descriptorOf(type)))
        .zadd(instances, Date.now(), 'old-1')
        .zremrangebyscore(instances, '-inf', Date.now() - STALE_MS * 4)
        .exec();
      expect(await redis.zscore(instances, 'killed-2')).toBeNull();
      await registry.heartbeat(descriptorOf(type), 'new-1', started);
      expect(await redis.zrange(typeKeys(type).started, 0, -1)).toEqual(['new-1']);
      expect(await redis.hkeys(typeKeys(type).descriptors)).toEqual(['new-1']);
    } finally {
      jest.restoreAllMocks();
    }
  });
});
