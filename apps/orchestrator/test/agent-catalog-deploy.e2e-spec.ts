import Redis from 'ioredis';
import { AgentRegistration, RedisAgentRegistry } from '@loom/agent-kit';
import { SharedClock, SystemRepository, SystemSessions } from '@loom/session';
import { createTestSessionInfra, TEST_REDIS_URL } from '@loom/testing';
import { AgentCatalog } from '../src/turn/agent-catalog';

const older: AgentRegistration = {
  agentType: 'tax-law',
  description: 'Income tax questions',
  role: 'specialist',
  intents: ['tax-law'],
  keywords: ['tax'],
};
const newer: AgentRegistration = {
  ...older,
  description: 'Income and property tax questions',
  keywords: ['tax', 'property'],
};

/**
 * A rolling deploy: an old and a new instance of one agent type, with different descriptors,
 * heartbeat side by side on the real Redis registry. The planner sees the new one's every turn,
 * and the catalog in MySQL is written when the descriptor changes, not at every heartbeat.
 */
describe('the agent catalog during a rolling deploy (Redis registry, MySQL catalog)', () => {
  let cleanup: () => Promise<void>;
  let system: SystemRepository;
  let registry: RedisAgentRegistry;
  const redis = new Redis(TEST_REDIS_URL);
  beforeAll(async () => {
    const t = await createTestSessionInfra('loom_catalog');
    cleanup = t.cleanup;
    system = new SystemRepository(t.infra.store);
    registry = new RedisAgentRegistry(redis, t.infra.keys.prefix);
  });
  afterAll(async () => {
    await cleanup();
    redis.disconnect();
  });

  it('plans with the newer instance at every turn and saves the catalog once per change', async () => {
    const catalog = new AgentCatalog(registry, system, new SharedClock(redis));
    const saves = jest.spyOn(system, 'saveValue');
    const planned = async () => {
      const { agents } = await catalog.agents();
      return agents.find((a) => a.agentType === 'tax-law');
    };
    const started = Date.now();
    await registry.heartbeat(older, 'tax-old', started - 60_000);
    expect(await planned()).toEqual(older);
    await registry.heartbeat(newer, 'tax-new', started);
    expect(await planned()).toEqual(newer);
    expect(saves).toHaveBeenCalledTimes(2); // first seen, then the new descriptor

    for (let i = 0; i < 20; i++) {
      await registry.heartbeat(older, 'tax-old', started - 60_000);
      expect(await planned()).toEqual(newer);
      await registry.heartbeat(newer, 'tax-new', started);
      expect(await planned()).toEqual(newer);
    }
    expect(saves).toHaveBeenCalledTimes(2);
    const stored = await system.value<Record<string, { descriptor: unknown }>>(
      SystemSessions.catalog,
      'agents',
    );
    expect(stored?.['tax-law'].descriptor).toEqual(newer);

    // Another orchestrator (or this one after its refresh) reads the same and writes nothing.
    const other = new AgentCatalog(registry, system, new SharedClock(redis));
    expect((await other.agents()).agents).toEqual([newer]);
    expect(saves).toHaveBeenCalledTimes(2);

    // The new instance leaves (a rollback): the old one's descriptor applies, saved once.
    await registry.remove('tax-law', 'tax-new');
    expect(await planned()).toEqual(older);
    await registry.heartbeat(older, 'tax-old', started - 60_000);
    expect(await planned()).toEqual(older);
    expect(saves).toHaveBeenCalledTimes(3);
    saves.mockRestore();
  });
});
