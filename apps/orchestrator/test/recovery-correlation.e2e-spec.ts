import { Injectable } from '@nestjs/common';
import { Writable } from 'stream';
import request from 'supertest';
import { AgentHandler, AgentTools, bootstrapAgent } from '@loom/agent-kit';
import { createPinoLogger, currentMdc, LoomLogger } from '@loom/observability';
import {
  ConversationRepository,
  ExecutionStatus,
  Owner,
  SessionContext,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { TaskRecovery } from '../src/recovery/task-recovery.service';
import { TaskLeases } from '../src/turn/task-run';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };
/** The correlation id the agent's handler ran under, by question. */
const seen = new Map<string, string | undefined>();
const hanging: Array<() => void> = [];

@Injectable()
class EchoLawHandler implements AgentHandler {
  async handle(ctx: SessionContext, _tools: AgentTools): Promise<any> {
    seen.set(ctx.question, currentMdc().correlationId);
    if (ctx.question.includes('hang')) await new Promise<void>((r) => hanging.push(r));
    return { answer: `answered: ${ctx.question}`, usage };
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * DESIGN.md §8 / docs/security.md: a task the recovery scheduler resumes (its orchestrator died
 * mid-turn) is still that turn's work. Its log lines, and the agent calls it makes again, carry
 * the turn's correlation id, as the run-index entry the turn wrote recorded it: an operator who
 * follows a client's x-correlation-id finds the whole story, recovery included.
 */
describe('a recovered task keeps its turn’s correlation id (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;
  let out = '';
  const owner: Owner = { tenantId: 'acme', userId: 'alice' };
  const lines = () =>
    out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('reccorr', {
      env: { LOG_LEVEL: 'info', RECOVERY_INTERVAL_MS: '3600000' },
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'echo-law',
            description: 'echoes',
            role: 'specialist',
            intents: ['echo'],
            keywords: ['echo'],
          },
          EchoLawHandler,
          env,
        ),
      ],
    });
    // Every Nest logger of the process (orchestrator and agent) writes here from now on.
    orch.app.useLogger(
      new LoomLogger(
        createPinoLogger({
          service: 'orchestrator',
          level: 'info',
          format: 'json',
          destination: new Writable({
            write(chunk, _enc, done) {
              out += chunk.toString();
              done();
            },
          }),
        }),
      ),
    );
  });
  afterAll(async () => {
    hanging.splice(0).forEach((r) => r());
    await orch?.close();
  });

  it('a turn records its correlation id in its run-index entry', async () => {
    const given = `turn-${Date.now()}`;
    const conv = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('alice', 'acme'))
      .send({});
    const turn = request(orch.app.getHttpServer())
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', orch.auth('alice', 'acme'))
      .set('x-correlation-id', given)
      .send({ content: 'echo and hang' })
      .then((r) => r);
    const until = Date.now() + 10_000;
    while (!seen.has('echo and hang')) {
      if (Date.now() > until) throw new Error('the agent never got the turn');
      await sleep(20);
    }
    const entries = await orch.get(SystemRepository).runs(100);
    const entry = entries.find((e) => e.conversationId === conv.body.conversationId);
    hanging.splice(0).forEach((r) => r());
    expect((await turn).status).toBe(201);
    expect(seen.get('echo and hang')).toBe(given);
    expect(entry).toMatchObject({ correlationId: given });
  });

  it("resumes the task under the turn's id: its log lines and its agent call carry it", async () => {
    const given = `crashed-turn-${Date.now()}`;
    const conversations = orch.get(ConversationRepository);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const taskId = 't_recoverycorr01';
    const question = 'echo after the crash';
    const turn = await storeAcceptedTurn(orch, owner, id, { taskId, question, key: 'k-corr' });
    const task = taskFixture(turn, 'echo-law', {
      status: TaskStatus.RUNNING,
      executions: [
        executionFixture('a_recoverycorr01', 'echo-law', { status: ExecutionStatus.RUNNING }),
      ],
      lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
    });
    await orch.get(TaskRepository).create(owner, task);
    await conversations.save(owner, { ...meta, activeTaskIds: [taskId] });
    // What the dead orchestrator's turn wrote (see the test above).
    await orch.get(SystemRepository).saveRun({
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: id,
      owner: 'orchestrator-dead',
      lockToken: null,
      createdAt: new Date().toISOString(),
      correlationId: given,
    });

    expect(await orch.get(TaskRecovery).scan()).toMatchObject({ due: 1, recovered: 1 });
    expect((await orch.get(TaskRepository).get(owner, id, taskId, true))?.status).toBe(
      TaskStatus.COMPLETED,
    );

    // The agent ran it under the turn's id.
    expect(seen.get(question)).toBe(given);
    // Every line about the task, orchestrator's and agent's, carries it.
    const about = lines().filter((l) => l.taskId === taskId);
    expect(about.some((l) => /^recovered /.test(String(l.msg)))).toBe(true);
    expect(about.length).toBeGreaterThan(1);
    for (const line of about) expect(line).toMatchObject({ correlationId: given });
  });

  // Last: a hand-over is this orchestrator's last act (what it runs from then on is handed over).
  it("hands a running task over on shutdown with the turn's ids on its lines", async () => {
    const given = `handed-over-${Date.now()}`;
    const conv = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('alice', 'acme'))
      .send({});
    const turn = request(orch.app.getHttpServer())
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', orch.auth('alice', 'acme'))
      .set('x-correlation-id', given)
      .send({ content: 'echo then hang over the shutdown' })
      .then((r) => r);
    const until = Date.now() + 10_000;
    while (!seen.has('echo then hang over the shutdown')) {
      if (Date.now() > until) throw new Error('the agent never got the turn');
      await sleep(20);
    }
    // What ShutdownHandOver does when the process is told to stop (outside any request).
    const leases = orch.get(TaskLeases);
    await leases.capLeases(Date.now() + 5000);
    expect(await leases.handOverAll()).toBe(1);
    expect((await turn).status).toBe(503);
    hanging.splice(0).forEach((r) => r());
    const handed = lines().find((l) => /^handed t_\S+ over/.test(String(l.msg)));
    expect(handed).toMatchObject({
      correlationId: given,
      tenantId: 'acme',
      conversationId: conv.body.conversationId,
    });
  });
});
