import { AgentRegistration, MemoryAgentRegistry } from '@loom/agent-kit';
import { MemorySessionStore, SystemRepository, SystemSessions } from '@loom/session';
import { AgentCatalog, RETIRED_KEY } from './agent-catalog';

const tax: AgentRegistration = {
  agentType: 'tax-law',
  description: 'Income tax questions',
  role: 'specialist',
  intents: ['tax-law'],
  keywords: ['tax'],
};

/** The catalog on the in-memory registry and store (both real implementations). */
describe('AgentCatalog', () => {
  const store = new MemorySessionStore();
  const system = new SystemRepository(store);
  const registry = new MemoryAgentRegistry();
  // A new catalog is a new orchestrator (or the same one after its refresh interval).
  const planned = async () =>
    (await new AgentCatalog(registry, system, { now: () => Date.now() }).agents()).agents.map(
      (a) => a.agentType,
    );

  it('keeps a stopped agent type until it is retired, and takes it back when it runs again', async () => {
    await registry.heartbeat(tax, 'tax-1', Date.now());
    expect(await planned()).toEqual(['tax-law']);

    await registry.remove('tax-law', 'tax-1');
    expect(await planned()).toEqual(['tax-law']); // stopped, not gone: its steps queue

    await system.saveValue(SystemSessions.catalog, RETIRED_KEY, { 'tax-law': Date.now() + 1 });
    expect(await planned()).toEqual([]);

    await new Promise((r) => setTimeout(r, 5));
    await registry.heartbeat(tax, 'tax-2', Date.now());
    expect(await planned()).toEqual(['tax-law']);
    await registry.remove('tax-law', 'tax-2');
    expect(await planned()).toEqual(['tax-law']); // seen again after it was retired
  });

  // `agents:retire` stamps the retirement on the deployment's clock (Redis TIME): an
  // orchestrator whose host clock runs ahead stamped its last sighting of the type minutes in
  // the future, after the retirement, and kept planning the retired type (its steps waited
  // AGENT_TIMEOUT_MS each) until the sighting aged out, 7 days later.
  it('stops planning a retired type on an orchestrator whose host clock runs ahead', async () => {
    const own = new SystemRepository(new MemorySessionStore());
    const realNow = Date.now.bind(Date);
    const shared = { now: () => realNow() }; // Redis's clock, as the SharedClock carries it
    const vat = { ...tax, agentType: 'vat-law', intents: ['vat-law'] };
    try {
      jest.spyOn(Date, 'now').mockImplementation(() => realNow() + 5 * 60_000);
      const catalog = () => new AgentCatalog(registry, own, shared);
      await registry.heartbeat(vat, 'vat-1', Date.now());
      expect((await catalog().agents()).agents.map((a) => a.agentType)).toContain('vat-law');
      await registry.remove('vat-law', 'vat-1');

      await own.saveValue(SystemSessions.catalog, RETIRED_KEY, { 'vat-law': shared.now() + 1 });
      const after = catalog();
      expect((await after.agents()).agents.map((a) => a.agentType)).not.toContain('vat-law');
      expect(await after.retiredNow('vat-law')).toBe(true);
    } finally {
      jest.restoreAllMocks();
    }
  });

  it('keeps a stopped agent type named like an Object member (`constructor`)', async () => {
    const named = { ...tax, agentType: 'constructor', intents: ['constructor'] };
    await registry.heartbeat(named, 'c-1', Date.now());
    expect(await planned()).toContain('constructor');
    await registry.remove('constructor', 'c-1');
    expect(await planned()).toContain('constructor');
  });

  it('forgets the agent types not seen running for the retention (7 days), in memory and stored', async () => {
    const own = new SystemRepository(new MemorySessionStore());
    const eightDaysAgo = Date.now() - 8 * 86_400_000;
    // A deployment that has churned through agent types (renamed, versioned, retired) for months.
    const gone = Object.fromEntries(
      Array.from({ length: 500 }, (_, i) => [
        `old-type-${i}`,
        {
          descriptor: { ...tax, agentType: `old-type-${i}`, intents: [`old-type-${i}`] },
          lastSeenAt: eightDaysAgo,
        },
      ]),
    );
    await own.saveValue(SystemSessions.catalog, 'agents', gone);
    const fresh = new MemoryAgentRegistry();
    const running = { ...tax, agentType: 'vat-law', intents: ['vat-law'] };
    await fresh.heartbeat(running, 'vat-1', Date.now());

    const catalog = new AgentCatalog(fresh, own, { now: () => Date.now() });
    expect((await catalog.agents()).agents.map((a) => a.agentType)).toEqual(['vat-law']);
    const stored = await own.value<Record<string, unknown>>(SystemSessions.catalog, 'agents');
    expect(Object.keys(stored ?? {})).toEqual(['vat-law']);
    const held = (catalog as unknown as { catalog: Record<string, unknown> }).catalog;
    expect(Object.keys(held)).toEqual(['vat-law']);
    await fresh.remove('vat-law', 'vat-1');
  });
});
