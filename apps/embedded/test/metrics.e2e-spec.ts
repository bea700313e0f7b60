import { INestApplication, INestMicroservice } from '@nestjs/common';
import { randomBytes } from 'crypto';
import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import request from 'supertest';
import { parseEnv } from '@loom/agent-kit';
import { parsePrometheusText, promSeries } from '@loom/testing';
import { AGENT as LABOR_LAW } from '../../labor-law-agent/src/agent';
import { createOrchestrator } from '../../orchestrator/src/bootstrap';
import { startEmbeddedAgents } from '../src/embedded-agents';
const { signJwt } = require('../../../scripts/lib/processes');

// docs/metrics.md: the embedded profile (one process, JSON files, TCP, no Redis) serves
// /metrics too; the dispatch queue gauges, read from Redis streams, are absent there.
describe('embedded profile: GET /metrics', () => {
  let dataDir: string;
  let agents: INestMicroservice[] = [];
  let app: INestApplication;
  const secret = randomBytes(24).toString('hex');

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-metrics-'));
    const env = parseEnv({
      LOOM_PROFILE: 'embedded',
      LOOM_DATA_DIR: dataDir,
      LOOM_JWT_SECRET: secret,
      LOG_LEVEL: 'silent',
    });
    agents = await startEmbeddedAgents([LABOR_LAW], env);
    app = await createOrchestrator(env);
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
    await Promise.all(agents.map((a) => a.close()));
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('counts a turn and the live agents, and has no queue gauges', async () => {
    const server = app.getHttpServer();
    const auth = `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, secret)}`;
    const conv = await request(server).post('/v1/conversations').set('authorization', auth);
    const turn = await request(server)
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', auth)
      .send({ content: 'My employer fired me without severance pay' });
    expect([turn.status, turn.body.agents]).toEqual([201, ['labor-law']]);

    const res = await request(server).get('/metrics');
    expect(res.status).toBe(200);
    const samples = parsePrometheusText(res.text);
    expect(promSeries(samples, 'loom_turns_total')).toEqual({ completed: 1 });
    expect(promSeries(samples, 'loom_agent_calls_total')).toEqual({ 'labor-law/completed': 1 });
    expect(promSeries(samples, 'loom_agent_instances')).toEqual({ 'labor-law': 1 });
    expect(promSeries(samples, 'loom_metrics_collect_errors_total')).toEqual({ '': 0 });
    for (const gauge of [
      'loom_dispatch_queue_pending',
      'loom_dispatch_queue_lag',
      'loom_dead_letters',
    ])
      expect(samples.has(gauge)).toBe(false);
  });
});
