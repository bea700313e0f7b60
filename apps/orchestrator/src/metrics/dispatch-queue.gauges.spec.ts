import { AgentRegistry, LoomEnv } from '@loom/agent-kit';
import { SessionInfra } from '@loom/session';
import { AgentCatalog } from '../turn/agent-catalog';
import { DispatchQueueGauges } from './dispatch-queue.gauges';
import { MetricsService } from './metrics.service';

/** The samples of one metric in the text of a scrape, by their label text. */
function samplesIn(text: string, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) out[m[2] ?? ''] = Number(m[3]);
  }
  return out;
}

/**
 * docs/metrics.md: scrape every replica, and take the gauges' `max` across them. Prometheus run
 * as an HA pair (or a person's curl beside it) scrapes one replica twice at once: each scrape
 * must show the instances there are, not their sum over the scrapes that overlapped.
 */
describe('DispatchQueueGauges', () => {
  it('shows the same values to scrapes that overlap', async () => {
    const metrics = new MetricsService();
    const catalog = {
      agents: async () => ({ agents: [{ agentType: 'labor-law' }, { agentType: 'ghost-law' }] }),
    } as unknown as AgentCatalog;
    const registry = {
      live: async () => [{ descriptor: { agentType: 'labor-law' }, instances: 2 }],
    } as unknown as AgentRegistry;
    const gauges = new DispatchQueueGauges(
      metrics,
      catalog,
      registry,
      { redis: null } as unknown as SessionInfra,
      { LOOM_KEY_PREFIX: 'loom:' } as LoomEnv,
    );
    gauges.onModuleInit();
    const expected = { '{agent_type="labor-law"}': 2, '{agent_type="ghost-law"}': 0 };
    expect(samplesIn(await metrics.scrape(), 'loom_agent_instances')).toEqual(expected);
    const overlapping = await Promise.all([metrics.scrape(), metrics.scrape(), metrics.scrape()]);
    for (const text of overlapping)
      expect(samplesIn(text, 'loom_agent_instances')).toEqual(expected);
  });
});
