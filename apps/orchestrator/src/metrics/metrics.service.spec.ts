import { LoomError, LoomErrorCode } from '@loom/session';
import { MetricsService } from './metrics.service';
import { ScrapeCollector } from './scraper';

/** The samples of one metric in the text of a scrape, by their label text. */
function samplesIn(text: string, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m && m[1] === name) out[m[2] ?? ''] = Number(m[3]);
  }
  return out;
}

/** The samples of one metric in a new scrape. */
const samples = async (metrics: MetricsService, name: string) =>
  samplesIn(await metrics.scrape(), name);

describe('MetricsService', () => {
  it('counts turns by outcome, a replay as replayed whatever it answered, and times completed ones', async () => {
    const metrics = new MetricsService();
    metrics.turn().completed();
    metrics.turn().failed(new LoomError(LoomErrorCode.LOCK_TIMEOUT, 'busy'));
    const replay = metrics.turn();
    replay.replayed();
    replay.failed(new LoomError(LoomErrorCode.AGENT_FAILED, 'stored failure'));
    const replayOk = metrics.turn();
    replayOk.replayed();
    replayOk.completed();
    expect(await samples(metrics, 'loom_turns_total')).toEqual({
      '{outcome="completed"}': 1,
      '{outcome="CONFLICT"}': 1,
      '{outcome="replayed"}': 2,
    });
    expect(await samples(metrics, 'loom_turn_duration_seconds_count')).toEqual({ '': 1 });
  });

  it('counts agent calls per folded agent type, timing only the ones that ran', async () => {
    const metrics = new MetricsService();
    metrics.agentCall('labor-law').completed(false);
    metrics.agentCall('labor-law').completed(true);
    metrics.agentCall('ghost-law').failed(new LoomError(LoomErrorCode.TIMEOUT, 'silent'));
    expect(await samples(metrics, 'loom_agent_calls_total')).toEqual({
      '{agent_type="labor-law",outcome="completed"}': 1,
      '{agent_type="labor-law",outcome="replayed"}': 1,
      '{agent_type="ghost-law",outcome="TIMEOUT"}': 1,
    });
    expect(await samples(metrics, 'loom_agent_call_duration_seconds_count')).toEqual({
      '{agent_type="labor-law"}': 1,
    });
  });

  it('sums model usage, starting at 0, and takes nothing negative or unreadable', async () => {
    const metrics = new MetricsService();
    expect(await samples(metrics, 'loom_llm_tokens_total')).toEqual({
      '{kind="prompt"}': 0,
      '{kind="completion"}': 0,
    });
    metrics.spent({ promptTokens: 120, completionTokens: 30, costUsd: 0.25 });
    metrics.spent({ promptTokens: 5, completionTokens: 0, costUsd: 0.5 });
    metrics.spent({ promptTokens: -3, completionTokens: NaN, costUsd: -1 });
    expect(await samples(metrics, 'loom_llm_tokens_total')).toEqual({
      '{kind="prompt"}': 125,
      '{kind="completion"}': 30,
    });
    expect(await samples(metrics, 'loom_llm_cost_usd_total')).toEqual({ '': 0.75 });
  });

  it('leaves out the gauges of a collector that fails or never answers, and counts it', async () => {
    const metrics = new MetricsService({ collectBudgetMs: 20 });
    const cleared: string[] = [];
    const collector = (name: string, read: ScrapeCollector['read']): ScrapeCollector => ({
      clear: () => void cleared.push(name),
      read,
    });
    let applied = 0;
    metrics.addCollector(collector('answers', async () => () => void applied++));
    metrics.addCollector(collector('hangs', () => new Promise(() => undefined)));
    metrics.addCollector(
      collector('fails', async () => {
        throw new Error('connection is closed');
      }),
    );
    metrics.addCollector(
      collector('partly', async (failed) => {
        failed(new Error('one agent type unreadable'));
        return () => void applied++;
      }),
    );
    const text = await metrics.scrape();
    expect(cleared.sort()).toEqual(['answers', 'fails', 'hangs', 'partly']);
    expect(applied).toBe(2);
    // The hung one, the failed one, and the failed part of the last.
    expect(samplesIn(text, 'loom_metrics_collect_errors_total')).toEqual({ '': 3 });
  });

  it('adds the process metrics with the loom_ prefix only when asked', async () => {
    const text = await new MetricsService({ processMetrics: true }).scrape();
    expect(text).toMatch(/^loom_process_cpu_seconds_total /m);
    expect(await new MetricsService().scrape()).not.toMatch(/process_cpu/);
  });
});
