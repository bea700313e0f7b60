import { INestMicroservice } from '@nestjs/common';
import request from 'supertest';
import { bootstrapAgent } from '@loom/agent-kit';
import { parsePrometheusText, promSeries } from '@loom/testing';
import { AGENT as CONTRACT_LAW } from '../../contract-law-agent/src/agent';
import { AGENT as LABOR_LAW } from '../../labor-law-agent/src/agent';
import { AGENT as LEGAL_RESEARCH } from '../../legal-research-agent/src/agent';
import {
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeTurnDeadAfterReply,
} from './in-process.support';

const METRICS_TOKEN = 'prometheus-scrape-token-0001';

/** Scrapes /metrics with the token: its samples by metric name. */
async function scrape(orch: InProcessOrchestrator) {
  const res = await request(orch.app.getHttpServer())
    .get('/metrics')
    .set('authorization', `Bearer ${METRICS_TOKEN}`);
  expect(res.status).toBe(200);
  // Prometheus' text format 0.0.4 (Express orders the parameters its own way).
  expect(res.headers['content-type'].split(/;\s*/).sort()).toEqual([
    'charset=utf-8',
    'text/plain',
    'version=0.0.4',
  ]);
  return { text: res.text, samples: parsePrometheusText(res.text) };
}

/** docs/metrics.md: GET /metrics of an orchestrator in-process, on real MySQL and Redis. */
describe('GET /metrics (in-process, real stores)', () => {
  describe('after a turn through two agents, behind LOOM_METRICS_TOKEN', () => {
    let orch: InProcessOrchestrator;

    beforeAll(async () => {
      orch = await startInProcessOrchestrator('metrics', {
        env: { LOOM_METRICS_TOKEN: METRICS_TOKEN },
        agents: async (env) => [
          await bootstrapAgent(LEGAL_RESEARCH, env),
          await bootstrapAgent(LABOR_LAW, env),
        ],
      });
    });
    afterAll(() => orch?.close());

    it('counts the turn once, its agent calls per type and the usage the conversation shows', async () => {
      const server = orch.app.getHttpServer();
      const auth = orch.auth('metrics-user', 'metrics-tenant');
      const conv = await request(server).post('/v1/conversations').set('authorization', auth);
      const id = conv.body.conversationId;
      const send = () =>
        request(server)
          .post(`/v1/conversations/${id}/messages`)
          .set('authorization', auth)
          .set('idempotency-key', 'metrics-turn-1')
          .send({ content: '公司辞退我不给经济补偿' });
      const turn = await send();
      expect(turn.status).toBe(201);
      // The client's retry: the stored turn again, a replay, not a second turn.
      expect((await send()).body).toEqual(turn.body);
      const task = (
        await request(server).get(`/v1/tasks/${turn.body.taskId}`).set('authorization', auth)
      ).body;
      const { usage } = (
        await request(server).get(`/v1/conversations/${id}`).set('authorization', auth)
      ).body;
      const calls: Record<string, number> = {};
      for (const e of task.executions as { agentType: string; status: string }[]) {
        expect(e.status).toBe('COMPLETED');
        calls[`${e.agentType}/completed`] = (calls[`${e.agentType}/completed`] ?? 0) + 1;
      }
      expect(Object.keys(calls).sort()).toEqual([
        'labor-law/completed',
        'legal-research/completed',
      ]);
      expect(usage.promptTokens).toBeGreaterThan(0);

      const { text, samples } = await scrape(orch);
      expect(promSeries(samples, 'loom_turns_total')).toEqual({ completed: 1, replayed: 1 });
      expect(promSeries(samples, 'loom_turn_duration_seconds_count')).toEqual({ '': 1 });
      expect(promSeries(samples, 'loom_agent_calls_total')).toEqual(calls);
      expect(promSeries(samples, 'loom_llm_tokens_total')).toEqual({
        prompt: usage.promptTokens,
        completion: usage.completionTokens,
      });
      expect(promSeries(samples, 'loom_llm_cost_usd_total')).toEqual({ '': usage.costUsd });
      expect(promSeries(samples, 'loom_tasks_recovered_total')).toEqual({});
      expect(promSeries(samples, 'loom_agent_instances')).toEqual({
        'labor-law': 1,
        'legal-research': 1,
      });
      // Both answered: nothing waits, nothing is held, nothing was dead-lettered.
      for (const gauge of [
        'loom_dispatch_queue_pending',
        'loom_dispatch_queue_lag',
        'loom_dead_letters',
      ])
        expect(promSeries(samples, gauge)).toEqual({ 'labor-law': 0, 'legal-research': 0 });
      expect(promSeries(samples, 'loom_metrics_collect_errors_total')).toEqual({ '': 0 });
      expect(samples.has('loom_process_cpu_seconds_total')).toBe(true);
      // No label names a tenant, user, conversation or task.
      for (const secret of ['metrics-tenant', 'metrics-user', id, turn.body.taskId])
        expect(text).not.toContain(secret);
    });

    it('answers 401 without the metrics token or with another one, an API token included', async () => {
      const server = orch.app.getHttpServer();
      expect((await request(server).get('/metrics')).body).toEqual({
        statusCode: 401,
        code: 'UNAUTHENTICATED',
        message: 'missing bearer token',
      });
      for (const wrong of [`Bearer ${METRICS_TOKEN}x`, orch.auth('metrics-user', 'metrics-tenant')])
        expect((await request(server).get('/metrics').set('authorization', wrong)).body).toEqual({
          statusCode: 401,
          code: 'UNAUTHENTICATED',
          message: 'invalid metrics token',
        });
      await scrape(orch);
    });

    it('is documented in the OpenAPI document, with its text body and its 401', async () => {
      const doc = (await request(orch.app.getHttpServer()).get('/docs-json')).body;
      const op = doc.paths['/metrics'].get;
      expect(Object.keys(op.responses).sort()).toEqual(['200', '400', '401']);
      expect(op.responses['200'].content['text/plain'].schema).toEqual({ type: 'string' });
    });
  });

  describe('an agent type whose instance stopped', () => {
    let orch: InProcessOrchestrator;
    let agent: INestMicroservice | undefined;

    beforeAll(async () => {
      orch = await startInProcessOrchestrator('metricsq', {
        env: {
          LOOM_METRICS_TOKEN: METRICS_TOKEN,
          AGENT_TIMEOUT_MS: '1000',
          AGENT_MAX_EXECUTION_MS: '1000',
        },
      });
    });
    afterAll(async () => {
      await agent?.close();
      await orch?.close();
    });

    it('shows the request a turn queued for it as lag, and the turn as TIMEOUT', async () => {
      // It ran (the planner's catalog knows it, its consumer group exists), then stopped.
      agent = await bootstrapAgent(CONTRACT_LAW, orch.env);
      expect(promSeries((await scrape(orch)).samples, 'loom_agent_instances')).toEqual({
        'contract-law': 1,
      });
      await agent.close();
      agent = undefined;
      const before = (await scrape(orch)).samples;
      expect(promSeries(before, 'loom_agent_instances')).toEqual({ 'contract-law': 0 });
      expect(promSeries(before, 'loom_dispatch_queue_lag')).toEqual({ 'contract-law': 0 });

      const server = orch.app.getHttpServer();
      const auth = orch.auth('bob', 'acme');
      const conv = await request(server).post('/v1/conversations').set('authorization', auth);
      const turn = await request(server)
        .post(`/v1/conversations/${conv.body.conversationId}/messages`)
        .set('authorization', auth)
        .send({ content: 'My landlord keeps my deposit after the lease ended' });
      expect([turn.status, turn.body.code]).toEqual([503, 'TIMEOUT']);

      const after = (await scrape(orch)).samples;
      expect(promSeries(after, 'loom_dispatch_queue_lag')).toEqual({ 'contract-law': 1 });
      expect(promSeries(after, 'loom_dispatch_queue_pending')).toEqual({ 'contract-law': 0 });
      expect(promSeries(after, 'loom_dead_letters')).toEqual({ 'contract-law': 0 });
      expect(promSeries(after, 'loom_turns_total')).toEqual({ TIMEOUT: 1 });
      expect(promSeries(after, 'loom_turn_duration_seconds_count')).toEqual({ '': 0 });
      expect(promSeries(after, 'loom_agent_calls_total')).toEqual({ 'contract-law/TIMEOUT': 1 });
    });

    it('counts a task the retry of its turn finished after its orchestrator died', async () => {
      // As resume-stored-reply.e2e-spec.ts: the dead orchestrator stored the reply, not the rest.
      const owner = { tenantId: 'acme', userId: 'alice' };
      const question = 'Is my non-compete clause valid?';
      const taskId = 't_metricsresume01';
      const { accepted } = await storeTurnDeadAfterReply(orch, owner, {
        taskId,
        question,
        key: 'key-1',
        agentType: 'ghost-law',
        agentSessionId: 'a_metricsresume01',
        reply: 'Only with compensation.',
      });
      const id = accepted.conversationId;

      const res = await request(orch.app.getHttpServer())
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', orch.auth('alice', 'acme'))
        .set('idempotency-key', 'key-1')
        .send({ content: question });
      expect([res.status, res.body.taskId]).toEqual([201, taskId]);
      const { samples } = await scrape(orch);
      expect(promSeries(samples, 'loom_tasks_recovered_total')).toEqual({ completed: 1 });
      expect(promSeries(samples, 'loom_turns_total')).toEqual({ TIMEOUT: 1, completed: 1 });
    });
  });

  describe('with LOOM_METRICS=false', () => {
    let orch: InProcessOrchestrator;

    beforeAll(async () => {
      orch = await startInProcessOrchestrator('metricsoff', { env: { LOOM_METRICS: 'false' } });
    });
    afterAll(() => orch?.close());

    it('does not serve /metrics, nor document it', async () => {
      const server = orch.app.getHttpServer();
      expect((await request(server).get('/metrics')).body).toEqual({
        statusCode: 404,
        code: 'NOT_FOUND',
        message: 'no such route',
      });
      expect(Object.keys((await request(server).get('/docs-json')).body.paths)).not.toContain(
        '/metrics',
      );
    });
  });
});
