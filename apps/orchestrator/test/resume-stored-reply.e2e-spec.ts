import request from 'supertest';
import { ConversationRepository, ExecutionStatus, TaskRepository, TaskStatus } from '@loom/session';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  storeTurnDeadAfterReply,
  taskFixture,
} from './in-process.support';

/**
 * An orchestrator died after it stored a turn's reply and before it closed the task. The retry
 * (same Idempotency-Key) resumes the task, and its specialist, asked again for its record, is
 * down by now: the turn was answered all the same.
 */
describe('resuming a task whose reply was stored before the crash (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('resume', {
      env: { AGENT_TIMEOUT_MS: '1000', AGENT_MAX_EXECUTION_MS: '1000', TASK_LEASE_MS: '1000' },
    });
  });
  afterAll(() => orch?.close());

  /** The dead orchestrator's last write: the reply of `taskId`, by a specialist now gone. */
  const storeReply = (id: string, taskId: string, content: string) =>
    orch.get(ConversationRepository).appendMessage({ tenantId: 'acme', userId: 'alice' }, id, {
      role: 'assistant',
      content,
      agentType: 'ghost-law',
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });

  /** Alice's same-key retry of the turn. */
  const retry = (id: string, key: string, question: string) =>
    request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', orch.auth('alice', 'acme'))
      .set('idempotency-key', key)
      .send({ content: question });

  it('answers the retry with the stored reply, not the error of a step asked again', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const question = 'Is my non-compete clause valid?';
    const taskId = 't_storedreply0001';
    // A specialist no instance runs now: asked again, it times out.
    const { accepted, reply } = await storeTurnDeadAfterReply(orch, owner, {
      taskId,
      question,
      key: 'key-1',
      agentType: 'ghost-law',
      agentSessionId: 'a_storedreply0001',
      reply: 'The clause is valid only with compensation.',
    });
    const id = accepted.conversationId;

    const res = await retry(id, 'key-1', question);
    expect(res.status).toBe(201);
    expect(res.body.taskId).toBe(taskId);
    expect(res.body.userMessage).toMatchObject({ seq: 1, content: question });
    expect(res.body.reply).toMatchObject({
      seq: 2,
      content: 'The clause is valid only with compensation.',
      agentType: 'ghost-law',
    });
    expect(reply.seq).toBe(2);
    expect((await conversations.messages(owner, id)).map((m) => m.seq)).toEqual([1, 2]);
    const after = await conversations.get(owner, id, true);
    expect(after.activeTaskIds).toEqual([]);
    expect(after.messageCount).toBe(2);
    expect(await tasks.get(owner, id, taskId, true)).toMatchObject({
      status: TaskStatus.COMPLETED,
      replySeq: 2,
      error: null,
    });
  });

  it('counts into the conversation only what a retried task spent since its retry', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Can my employer change my salary?';
    const taskId = 't_retriedreply001';
    const turn = await storeAcceptedTurn(orch, owner, id, { taskId, question, key: 'key-2' });
    const spent = { promptTokens: 100, completionTokens: 20, costUsd: 0.5 };
    // Its first attempt failed 503 (planner and specialist counted then); a retry reopened it,
    // stored the reply of the step run again and died before it closed the task.
    const task = taskFixture(turn, 'ghost-law', {
      status: TaskStatus.RUNNING,
      planUsage: { promptTokens: 7, completionTokens: 3, costUsd: 0.01 },
      countedExecutions: 1,
      executions: [
        executionFixture('a_retriedfirst001', 'ghost-law', {
          status: ExecutionStatus.FAILED,
          completedAt: new Date().toISOString(),
          error: { code: 'UNAVAILABLE', message: 'the model endpoint is busy' },
          usage: spent,
        }),
        executionFixture('a_retriedagain001', 'ghost-law', { status: ExecutionStatus.RUNNING }),
      ],
      lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
    });
    await tasks.create(owner, task);
    const counted = { promptTokens: 107, completionTokens: 23, costUsd: 0.51 };
    await conversations.save(owner, {
      ...meta,
      title: 'Salary',
      usage: counted,
      activeTaskIds: [taskId],
    });
    await storeReply(id, taskId, 'Not without your consent.');

    const res = await retry(id, 'key-2', question);
    expect(res.status).toBe(201);
    expect(res.body.reply).toMatchObject({ seq: 2, content: 'Not without your consent.' });
    const after = await conversations.get(owner, id, true);
    expect(after.activeTaskIds).toEqual([]);
    // The step asked again reported nothing: the first attempt's cost is not counted twice.
    expect(after.usage).toEqual(counted);
  });
});
