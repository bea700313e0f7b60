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
      (staleMs) => new RedisAgentRegistry(redis, prefix.prefix, staleMs),
      () => `tax-${++n}`,
      'redis',
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
    // Its departures stay until they expire by themselves (see the late heartbeat below).
    const leftTtl = await redis.pttl(`${instances}:left`);
    expect(leftTtl > 0 && leftTtl <= STALE_MS * 4).toBe(true);
    expect(await redis.hexists(`${prefix.prefix}agents:{registry}`, gone)).toBe(0);
    expect((await registry.live()).map((a) => a.descriptor.agentType)).toContain(running);
  });

  // agents:retire right after the last instance stopped: a heartbeat that instance sent before it
  // left, held up in the network (or sent again after a reconnect), may reach Redis after the
  // type was forgotten. It used to find the departures deleted with the rest and list the
  // stopped instance again, and the orchestrators, seeing the type run after its retirement,
  // took it back into planning for a week.
  it('a late heartbeat of an instance that left lists nothing once its type is forgotten', async () => {
    const registry = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
    const type = `retired-late-${++n}`;
    const startedAt = Date.now();
    await registry.heartbeat(descriptorOf(type), 'late-1', startedAt);
    await registry.remove(type, 'late-1');
    expect(await registry.forget(type)).toBe(true);
    await registry.heartbeat(descriptorOf(type), 'late-1', startedAt); // the late beat
    expect((await registry.live()).map((a) => a.descriptor.agentType)).not.toContain(type);
    const instances = `${prefix.prefix}agents:{registry}:${type}`;
    expect(await redis.exists(instances)).toBe(0);
    expect(await redis.hexists(`${prefix.prefix}agents:{registry}`, type)).toBe(0);
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

  // Its heartbeat zset keeps no TTL (only its beats prune it): the ids a dead type leaves there
  // are never read as live, so neither GET /v1/agents nor the planner sees the type.
  it('lists no instance of a type whose instances all died, whatever ids its keys still hold', async () => {
    // Long enough that the read right after the beat finds it live on a busy machine (a stall
    // over 100 ms made it stale already), short enough that waiting out four of it stays short.
    const staleMs = 400;
    const registry = new RedisAgentRegistry(redis, prefix.prefix, staleMs);
    const type = `dead-${++n}`;
    await registry.heartbeat(descriptorOf(type), 'dead-1', Date.now());
    expect((await registry.live()).map((a) => a.descriptor.agentType)).toContain(type);
    await new Promise((r) => setTimeout(r, staleMs * 4 + 100)); // its other keys have expired
    expect(
      await redis.zscore(`${prefix.prefix}agents:{registry}:${type}`, 'dead-1'),
    ).not.toBeNull();
    expect((await registry.live()).map((a) => a.descriptor.agentType)).not.toContain(type);
  });

  /**
   * Beats of `registry` as sent from a host whose clock is `skewMs` off; the rest of the test
   * (the orchestrator's reads) runs on this host's clock.
   */
  async function beatFromSkewedHost(
    registry: RedisAgentRegistry,
    type: string,
    instanceId: string,
    skewMs: number,
  ): Promise<void> {
    const realNow = Date.now.bind(Date);
    const skewed = jest.spyOn(Date, 'now').mockImplementation(() => realNow() + skewMs);
    try {
      await registry.heartbeat(descriptorOf(type), instanceId, Date.now());
    } finally {
      skewed.mockRestore();
    }
  }

  // Liveness compared an agent's own Date.now() with the orchestrator's: an agent on a host
  // whose clock ran more than the staleness behind was never planned with ("no live instance",
  // 503 TIMEOUT), and one whose clock ran ahead stayed live after it died.
  it("reads an instance live whatever its host's clock says, by Redis's clock", async () => {
    const type = `skewed-${++n}`;
    await beatFromSkewedHost(
      new RedisAgentRegistry(redis, prefix.prefix, STALE_MS),
      type,
      'behind-1',
      -STALE_MS * 4,
    );
    const orchestrator = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
    expect((await orchestrator.live()).find((a) => a.descriptor.agentType === type)).toEqual({
      descriptor: descriptorOf(type),
      instances: 1,
    });
  });

  it("reads an instance gone once silent for the staleness, however far ahead its host's clock ran", async () => {
    // Long enough that the read right after the beat finds it live on a busy machine.
    const staleMs = 1500;
    const type = `ahead-${++n}`;
    await beatFromSkewedHost(
      new RedisAgentRegistry(redis, prefix.prefix, staleMs),
      type,
      'ahead-1',
      60_000,
    );
    const orchestrator = new RedisAgentRegistry(redis, prefix.prefix, staleMs);
    expect((await orchestrator.live()).map((a) => a.descriptor.agentType)).toContain(type);
    await new Promise((r) => setTimeout(r, staleMs + 300)); // it died: no more beats
    expect((await orchestrator.live()).map((a) => a.descriptor.agentType)).not.toContain(type);
    expect(await orchestrator.forget(type)).toBe(true);
  });

  // An agent of a version before start times prunes only the heartbeat zset: an instance it
  // forgets must leave the start times and descriptors as well, not stay there for good.
  it('forgets the start time and descriptor of an instance an older version pruned', async () => {
    // Beats are timed by Redis's clock: time passes for real, over a short staleness.
    const staleMs = 100;
    const pastForgetting = () => new Promise((r) => setTimeout(r, staleMs * 4 + 50));
    const registry = new RedisAgentRegistry(redis, prefix.prefix, staleMs);
    const type = `mixed-${++n}`;
    const instances = `${prefix.prefix}agents:{registry}:${type}`;
    const started = Date.now();
    await registry.heartbeat(descriptorOf(type), 'new-1', started);
    await registry.heartbeat(descriptorOf(type), 'killed', started + 1);
    await pastForgetting();
    await registry.heartbeat(descriptorOf(type), 'new-1', started); // 'killed' is forgotten
    expect(await redis.zscore(typeKeys(type).started, 'killed')).toBeNull();

    await registry.heartbeat(descriptorOf(type), 'killed-2', started + 2);
    await pastForgetting();
    // The old version's heartbeat (its MULTI, as it was) prunes 'killed-2' from the zset.
    await redis
      .multi()
      .hset(`${prefix.prefix}agents:{registry}`, type, JSON.stringify(descriptorOf(type)))
      .zadd(instances, Date.now(), 'old-1')
      .zremrangebyscore(instances, '-inf', Date.now() - staleMs * 4)
      .exec();
    expect(await redis.zscore(instances, 'killed-2')).toBeNull();
    await registry.heartbeat(descriptorOf(type), 'new-1', started);
    expect(await redis.zrange(typeKeys(type).started, 0, -1)).toEqual(['new-1']);
    expect(await redis.hkeys(typeKeys(type).descriptors)).toEqual(['new-1']);
  });
});
