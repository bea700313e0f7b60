import { AgentRegistration } from '../contracts/agent-descriptor';
import { AgentRegistry } from './agent-registry';

/** The registry's staleness in these tests (the default): an instance silent longer is not live. */
export const STALE_MS = 15_000;

/**
 * How a registry under the contract tells time: `mocked`, by this process's Date.now (moved by
 * hand, never waited on; the in-memory registry); `redis`, by the Redis server's clock, which
 * no test moves: time passes for real, over a staleness of {@link REAL_STALE_MS}.
 */
export type ContractClock = 'mocked' | 'redis';
/**
 * Real time under a busy machine (suites run side by side on two cores): an instance that must
 * still be live is checked well within the staleness, one that must not, well past it.
 */
export const REAL_STALE_MS = 3000;
/** Real time: a moment is waited for this much longer, so the beats made before it are older. */
const REAL_MARGIN_MS = 600;
/** The staleness of the one test that only waits for instances to fall silent (4 × it). */
const REAL_FORGET_STALE_MS = 1000;

/**
 * What every registry does when instances of one type register different descriptors (a
 * rolling deploy): the descriptor read is always that of the most recently started live
 * instance, and the next newest one's once it is gone. Shared by the Redis suite (integration)
 * and the in-memory one (unit). `make` builds a registry of the staleness given.
 */
export function registryContract(
  make: (staleMs: number) => AgentRegistry,
  uniqueType: () => string,
  clock: ContractClock = 'mocked',
): void {
  const staleMs = clock === 'mocked' ? STALE_MS : REAL_STALE_MS;
  let offset = 0;
  let t0 = 0;
  const realNow = Date.now.bind(Date);
  beforeEach(() => {
    offset = 0;
    t0 = realNow();
    if (clock === 'mocked') jest.spyOn(Date, 'now').mockImplementation(() => realNow() + offset);
  });
  afterEach(() => jest.restoreAllMocks());
  /** From now on `at` counts from here: the beats made before were made at 0. */
  const mark = () => {
    t0 = realNow();
    offset = 0;
  };
  /** The registry's clock reads `ms` past the mark (for real: `ms` and a margin later). */
  const at = async (ms: number): Promise<void> => {
    if (clock === 'mocked') offset = ms;
    else await new Promise((r) => setTimeout(r, Math.max(0, t0 + ms + REAL_MARGIN_MS - realNow())));
  };

  const versions = (agentType: string) => {
    const older: AgentRegistration = {
      agentType,
      description: 'Income tax questions',
      role: 'specialist',
      intents: [agentType],
      keywords: ['tax'],
    };
    const newer: AgentRegistration = {
      ...older,
      description: 'Income and property tax questions',
      keywords: ['tax', 'property'],
    };
    return { older, newer };
  };
  /** A type with a newer instance ('new-1', started now) and an older one ('old-1', a minute before). */
  const bothVersionsRunning = async (stale = staleMs) => {
    const registry = make(stale);
    const type = uniqueType();
    const { older, newer } = versions(type);
    const started = Date.now();
    await registry.heartbeat(newer, 'new-1', started);
    await registry.heartbeat(older, 'old-1', started - 60_000);
    return { registry, type, older, newer, started };
  };
  const readOf = async (registry: AgentRegistry, agentType: string) =>
    (await registry.live()).find((a) => a.descriptor.agentType === agentType);

  it('reads the newest started instance however their heartbeats alternate, and names it to the older one', async () => {
    const registry = make(staleMs);
    const type = uniqueType();
    const { older, newer } = versions(type);
    const started = Date.now();
    await registry.heartbeat(older, 'old-1', started - 60_000);
    expect((await readOf(registry, type))?.descriptor).toEqual(older);
    await registry.heartbeat(newer, 'new-1', started);

    for (let i = 0; i < 25; i++) {
      const forOlder = await registry.heartbeat(older, 'old-1', started - 60_000);
      expect(await readOf(registry, type)).toEqual({ descriptor: newer, instances: 2 });
      expect(forOlder).toEqual({
        inForce: { instanceId: 'new-1', startedAt: started, descriptor: newer },
      });
      const forNewer = await registry.heartbeat(newer, 'new-1', started);
      expect(await readOf(registry, type)).toEqual({ descriptor: newer, instances: 2 });
      expect(forNewer).toEqual({ inForce: null });
    }
  });

  it('goes back to the older instance once the newer one is removed, and once it falls silent', async () => {
    const { registry, type, older, newer, started } = await bothVersionsRunning();
    expect((await readOf(registry, type))?.descriptor).toEqual(newer);

    await registry.remove(type, 'new-1');
    expect(await readOf(registry, type)).toEqual({ descriptor: older, instances: 1 });
    expect(await registry.heartbeat(older, 'old-1', started - 60_000)).toEqual({ inForce: null });

    // The newer one starts again, then dies without leaving: once its last beat is older than
    // the staleness, the older one's descriptor applies, before the older one even beats again.
    await registry.heartbeat(newer, 'new-2', started + 1);
    mark();
    expect((await readOf(registry, type))?.descriptor).toEqual(newer);
    await at(staleMs / 2);
    await registry.heartbeat(older, 'old-1', started - 60_000);
    expect((await readOf(registry, type))?.descriptor).toEqual(newer); // still live
    await at(staleMs + 1);
    expect(await readOf(registry, type)).toEqual({ descriptor: older, instances: 1 });
    expect(await registry.heartbeat(older, 'old-1', started - 60_000)).toEqual({ inForce: null });
  });

  it('breaks a tie of start times the same way every time', async () => {
    const registry = make(staleMs);
    const type = uniqueType();
    const { older, newer } = versions(type);
    const started = Date.now();
    for (let i = 0; i < 5; i++) {
      await registry.heartbeat(newer, 'b-instance', started);
      await registry.heartbeat(older, 'a-instance', started);
      expect((await readOf(registry, type))?.descriptor).toEqual(newer);
      await registry.heartbeat(older, 'a-instance', started);
      expect((await readOf(registry, type))?.descriptor).toEqual(newer);
    }
  });

  it('forgets an instance silent for four times the staleness, and never brings its descriptor back', async () => {
    const stale = clock === 'mocked' ? staleMs : REAL_FORGET_STALE_MS;
    const { registry, type, older, started } = await bothVersionsRunning(stale);
    mark();
    await at(stale * 4 + 1);
    await registry.heartbeat(older, 'old-1', started - 60_000);
    expect(await readOf(registry, type)).toEqual({ descriptor: older, instances: 1 });
    if (clock === 'redis') return;
    offset = 0; // a clock that steps back does not revive the forgotten instance
    expect(await readOf(registry, type)).toEqual({ descriptor: older, instances: 1 });
  });

  it('reads past many newer instances that fell silent', async () => {
    const registry = make(staleMs);
    const type = uniqueType();
    const { older } = versions(type);
    const of = (i: number) => ({ ...older, description: `version ${i}` });
    const started = Date.now();
    for (let i = 0; i < 20; i++) await registry.heartbeat(of(i), `i-${i}`, started + i);
    expect((await readOf(registry, type))?.descriptor).toEqual(of(19));
    mark();
    await at(staleMs + 1); // only the two that started first are still heard from
    for (const i of [0, 1]) await registry.heartbeat(of(i), `i-${i}`, started + i);
    expect(await readOf(registry, type)).toEqual({ descriptor: of(1), instances: 2 });
  });
}
