import { Logger } from '@nestjs/common';
import { SharedClock } from '@loom/session';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { AgentRegistry, HeartbeatResult } from '../registry/agent-registry';
import { AgentHeartbeat } from './agent-heartbeat.service';

const own: AgentRegistration = {
  agentType: 'tax-law',
  description: 'Income tax questions',
  role: 'specialist',
  intents: ['tax-law'],
  keywords: ['tax'],
};
const newer = { ...own, keywords: ['tax', 'property'] };

/** An instance whose descriptor is not the one in force says so once, naming the difference. */
describe('AgentHeartbeat', () => {
  afterEach(() => jest.restoreAllMocks());

  it('warns once while a newer instance with another descriptor is in force', async () => {
    const results: HeartbeatResult[] = [];
    const calls: number[] = [];
    const registry = {
      heartbeat: async (_d: AgentRegistration, _id: string, startedAt: number) => {
        calls.push(startedAt);
        return results.shift() ?? { inForce: null };
      },
    } as unknown as AgentRegistry;
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    const heartbeat = new AgentHeartbeat(registry, own, 'tax-old', new SharedClock(null));
    const beat = () => (heartbeat as unknown as { beat(): Promise<boolean> }).beat();
    const inForce = { instanceId: 'tax-new', startedAt: Date.UTC(2025, 0, 2), descriptor: newer };

    results.push({ inForce }, { inForce }, { inForce }, { inForce: null }, { inForce });
    for (let i = 0; i < 5; i++) await beat();
    expect(new Set(calls).size).toBe(1); // the same start time on every beat
    expect(warn).toHaveBeenCalledTimes(2); // once, and again after its own was in force between
    expect(warn.mock.calls[0][0]).toMatch(
      /^tax-law: the orchestrators plan with the descriptor of instance tax-new \(started 2025-01-02T00:00:00\.000Z\), not this one's \(tax-old, started .*\): it differs in keywords \+property$/,
    );

    // In force with the same descriptor (another instance of the same version): no warning.
    results.push({ inForce: { ...inForce, instanceId: 'tax-same', descriptor: own } });
    await beat();
    expect(warn).toHaveBeenCalledTimes(2);
  });
});
