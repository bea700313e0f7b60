import { Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { SharedClock } from '@loom/session';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { RedisAgentRegistry } from '../registry/agent-registry';
import { AgentHeartbeat } from './agent-heartbeat.service';

const STALE_MS = 15_000;
const version = (keywords: string[]): AgentRegistration => ({
  agentType: 'tax-law',
  description: 'Income tax questions',
  role: 'specialist',
  intents: ['tax-law'],
  keywords,
});

/**
 * Rolling deploys pick the descriptor of the most recently started instance: "started" must be
 * on the clock every host shares (Redis's), not the host's own, or an old instance on a host
 * whose clock runs ahead keeps the old descriptor in force after the new version started.
 */
describe('AgentHeartbeat start time (real Redis)', () => {
  const prefix = createTestPrefix('heartbeat-start');
  const redis = new Redis(TEST_REDIS_URL);
  const started: AgentHeartbeat[] = [];
  beforeEach(() => {
    jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(started.splice(0).map((h) => h.onApplicationShutdown()));
  });
  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  /** One instance whose host's wall clock is `skewMs` off, started (first beat) on it. */
  async function startInstance(
    descriptor: AgentRegistration,
    instanceId: string,
    skewMs: number,
  ): Promise<AgentHeartbeat> {
    const realNow = Date.now.bind(Date);
    const skewed = jest.spyOn(Date, 'now').mockImplementation(() => realNow() + skewMs);
    try {
      const clock = new SharedClock(redis);
      await clock.sync();
      const registry = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
      const heartbeat = new AgentHeartbeat(registry, descriptor, instanceId, clock);
      started.push(heartbeat);
      await heartbeat.onApplicationBootstrap();
      return heartbeat;
    } finally {
      skewed.mockRestore();
    }
  }

  it('puts the newer version in force although the old host clock runs a minute ahead', async () => {
    const old = version(['tax']);
    const current = version(['tax', 'property']);
    await startInstance(old, 'tax-law-old', 60_000);
    await new Promise((r) => setTimeout(r, 50)); // the new version starts after the old one
    await startInstance(current, 'tax-law-new', 0);

    const registry = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
    const tax = (await registry.live()).find((a) => a.descriptor.agentType === 'tax-law');
    expect(tax?.instances).toBe(2);
    expect(tax?.descriptor.keywords).toEqual(['tax', 'property']);
  });

  it('puts the newer version in force although its own host clock runs a minute behind', async () => {
    const old = version(['tax', 'old']);
    const current = version(['tax', 'new']);
    await startInstance(old, 'tax-law-old2', 0);
    await new Promise((r) => setTimeout(r, 50));
    await startInstance(current, 'tax-law-new2', -60_000);

    const registry = new RedisAgentRegistry(redis, prefix.prefix, STALE_MS);
    const tax = (await registry.live()).find((a) => a.descriptor.agentType === 'tax-law');
    expect(tax?.descriptor.keywords).toEqual(['tax', 'new']);
  });
});
