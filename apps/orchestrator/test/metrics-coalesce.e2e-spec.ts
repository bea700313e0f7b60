import request from 'supertest';
import { bootstrapAgent } from '@loom/agent-kit';
import { FreezableTcpProxy, parsePrometheusText, promSeries, TEST_REDIS_URL } from '@loom/testing';
import { AGENT as CONTRACT_LAW } from '../../contract-law-agent/src/agent';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * /metrics is open unless LOOM_METRICS_TOKEN is set (docs/metrics.md), and every scrape read the
 * live agents and each known agent type's request queue from Redis (a script per type, up to
 * 200 types): a flood of scrapes from anyone who reaches the port was a flood of Redis round
 * trips, piling up while Redis is slow to answer. Scrapes that come while the gauges are being
 * read share that read.
 */
describe('GET /metrics: scrapes at once share one read of the queues', () => {
  let proxy: FreezableTcpProxy;
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    const redis = new URL(TEST_REDIS_URL);
    proxy = await FreezableTcpProxy.start({
      host: redis.hostname,
      port: Number(redis.port || 6379),
    });
    const url = new URL(TEST_REDIS_URL);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    orch = await startInProcessOrchestrator('metricscoalesce', {
      env: { REDIS_URL: url.toString() },
      agents: async (env) => [await bootstrapAgent(CONTRACT_LAW, env)],
    });
  });
  afterAll(async () => {
    await orch?.close();
    await proxy?.close();
  });

  it('reads the queues once for 50 scrapes at once while Redis is slow to answer', async () => {
    const server = orch.app.getHttpServer();
    // A read starts with the registry's live agents: its script, with the one key it names.
    const key = `${orch.env.LOOM_KEY_PREFIX}agents:{registry}`;
    const reads = proxy.countSent(`\r\n1\r\n$${Buffer.byteLength(key)}\r\n${key}\r\n`);
    /** What `n` scrapes at once, while Redis answers nothing, send it once it answers again. */
    const sentFor = async (n: number) => {
      const before = reads();
      // Each read waits out the scrape's budget (2 s), then goes on.
      proxy.freeze();
      const scrapes = await Promise.all(
        Array.from({ length: n }, () => request(server).get('/metrics')),
      );
      proxy.thaw();
      expect(scrapes.map((s) => s.status).every((s) => s === 200)).toBe(true);
      for (let i = 0; i < 100 && reads() === before; i++)
        await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 500));
      return reads() - before;
    };
    const one = await sentFor(1);
    expect(one).toBeGreaterThan(0);
    // One read's commands, not one read's per scrape.
    expect(await sentFor(50)).toBe(one);
    // And a scrape reads them again, fresh, once that read is over.
    const fresh = await request(server).get('/metrics');
    expect(promSeries(parsePrometheusText(fresh.text), 'loom_agent_instances')).toEqual({
      'contract-law': 1,
    });
  });
});
