import request from 'supertest';
import {
  ConversationRepository,
  ExecutionClaims,
  ExecutionStatus,
  SESSION_INFRA,
  SessionInfra,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

/**
 * A same-key retry of a turn that failed 503 runs the failed step again under a new
 * agentSessionId. The execution it replaces may still be running on its agent (slow, or paused
 * and resumed): its claim is revoked, so its next write is refused.
 */
describe('a retry of a failed turn revokes the claims of the executions it replaces (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('retryrevoke', {
      env: {
        LOG_LEVEL: 'error',
        // No instance of its specialist runs: the retry's new execution fails 503 again, soon.
        AGENT_TIMEOUT_MS: '1000',
        AGENT_MAX_EXECUTION_MS: '1000',
      },
    });
  });
  afterAll(() => orch?.close());

  it("refuses the replaced execution's next write, and only its", async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const infra = orch.get<SessionInfra>(SESSION_INFRA);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Is my non-compete clause valid?';
    const taskId = 't_retryrevoke0001';
    const turn = await storeAcceptedTurn(orch, owner, id, { taskId, question, key: 'key-1' });
    const failedAt = { status: ExecutionStatus.FAILED, completedAt: new Date().toISOString() };
    const failed = taskFixture(turn, 'ghost-law', {
      plan: [
        { agentType: 'ghost-law', required: true, dependsOn: [] },
        { agentType: 'other-law', required: false, dependsOn: [] },
      ],
      status: TaskStatus.FAILED,
      executions: [
        executionFixture('a_retryrevokeold1', 'ghost-law', {
          ...failedAt,
          error: { code: 'TIMEOUT', message: 'ghost-law did not answer in time' },
        }),
        // An agent's own failure stands: not run again, its execution not replaced.
        executionFixture('a_retryrevokekept', 'other-law', {
          ...failedAt,
          error: { code: 'AGENT_FAILED', message: 'the content filter refused' },
        }),
      ],
      completedAt: new Date().toISOString(),
      error: { code: 'TIMEOUT', message: 'required agent ghost-law failed: no answer in time' },
    });
    await tasks.create(owner, failed);
    await conversations.save(owner, { ...meta, messageCount: 1 });
    // Both executions still running on their agents, each holding its claim as an agent does.
    const claims = new ExecutionClaims(infra.redis, infra.keys);
    const deadline = Date.now() + 60_000;
    const replaced = await claims.acquire(id, 'a_retryrevokeold1', deadline);
    const kept = await claims.acquire(id, 'a_retryrevokekept', deadline);
    await replaced.confirm();

    const res = await request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', orch.auth('alice', 'acme'))
      .set('idempotency-key', 'key-1')
      .send({ content: question });

    expect([res.status, res.body.code]).toEqual([503, 'TIMEOUT']);
    const task = await tasks.get(owner, id, taskId, true);
    expect(task?.executions.map((e) => [e.agentSessionId, e.status])).toEqual([
      ['a_retryrevokeold1', ExecutionStatus.FAILED],
      ['a_retryrevokekept', ExecutionStatus.FAILED],
      [expect.not.stringMatching(/^a_retryrevoke/), ExecutionStatus.FAILED],
    ]);
    await expect(replaced.confirm()).rejects.toMatchObject({
      code: 'SUPERSEDED',
      message: 'a retry of its task replaced this execution: nothing more is written',
    });
    await expect(kept.confirm()).resolves.toBeUndefined();
    await Promise.all([replaced.release(), kept.release()]);
  });
});
