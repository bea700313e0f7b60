import request from 'supertest';
import { bootstrapAgent } from '@loom/agent-kit';
import {
  ConversationRepository,
  ExecutionStatus,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { LABOR_LAW_DESCRIPTOR } from '../../labor-law-agent/src/labor-law.descriptor';
import { LaborLawHandler } from '../../labor-law-agent/src/labor-law.handler';
import { TaskRecovery } from '../src/recovery/task-recovery.service';
import {
  executionFixture,
  InProcessOrchestrator,
  sha,
  startInProcessOrchestrator,
  taskFixture,
} from './in-process.support';

const WENT_ON = {
  code: 'CONFLICT',
  message:
    'this turn failed and the conversation has gone on since: send the message again under a new Idempotency-Key',
};

/**
 * An orchestrator died after it created a turn's task and before the conversation's
 * activeTaskIds named it (the two are written side by side). The next turn did not wait for the
 * task, and answered. The recovery scan, finding the task through the run index, must not
 * append its reply after that later turn: the task fails, and its key answers 409.
 */
describe('resuming a task the conversation went on past (in-process, real stores and agent)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('wenton', {
      env: {
        LOG_LEVEL: 'error',
        RECOVERY_INTERVAL_MS: '3600000', // the test runs the scan itself
      },
      agents: async (env) => [await bootstrapAgent(LABOR_LAW_DESCRIPTOR, LaborLawHandler, env)],
    });
  });
  afterAll(() => orch?.close());

  it('fails the task instead of replying after the later turn; its key answers 409', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const system = orch.get(SystemRepository);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = '公司辞退我不给经济补偿';
    const taskId = 't_wentonpast00001';
    const createdAt = new Date().toISOString();
    // The dead turn's writes up to its task, as TurnService.start makes them, but not the save
    // of activeTaskIds beside the task.
    await system.saveRun({
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: id,
      owner: 'orchestrator-dead',
      lockToken: 'holder-dead.0000',
      createdAt,
    });
    await tasks.rememberIdempotent(owner, id, sha('key-1'), {
      taskId,
      requestHash: sha(question),
      userSeq: 1,
    });
    await conversations.appendMessage(owner, id, {
      role: 'user',
      content: question,
      agentType: null,
      taskId,
      createdAt,
      tokens: 0,
    });
    const turn = { owner, conversationId: id, taskId, question, key: 'key-1', userSeq: 1 };
    const task = taskFixture(turn, 'labor-law', {
      status: TaskStatus.RUNNING,
      executions: [
        executionFixture('a_wentonpast00001', 'labor-law', {
          status: ExecutionStatus.RUNNING,
          startedAt: createdAt,
        }),
      ],
      // Its lease ran out since: the scan finds it due.
      lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
      createdAt,
    });
    await tasks.create(owner, task);

    // The next turn goes ahead: the task is not among the conversation's active tasks.
    const post = (content: string, key?: string) => {
      const req = request(orch.app.getHttpServer())
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', orch.auth('alice', 'acme'));
      return (key ? req.set('idempotency-key', key) : req).send({ content });
    };
    const later = await post('试用期可以随时解除劳动合同吗');
    expect(later.status).toBe(201);
    expect([later.body.userMessage.seq, later.body.reply.seq]).toEqual([2, 3]);

    const report = await orch.get(TaskRecovery).scan();

    expect(report).toEqual({ indexed: 1, due: 1, recovered: 1 });
    expect(await tasks.get(owner, id, taskId, true)).toMatchObject({
      status: TaskStatus.FAILED,
      error: WENT_ON,
      replySeq: null,
      lease: null,
    });
    const log = async () =>
      (await conversations.messages(owner, id)).map((m) => [m.seq, m.role, m.taskId]);
    const expected = [
      [1, 'user', taskId],
      [2, 'user', later.body.taskId],
      [3, 'assistant', later.body.taskId],
    ];
    expect(await log()).toEqual(expected);
    const after = await conversations.get(owner, id, true);
    expect([after.activeTaskIds, after.messageCount]).toEqual([[], 3]);
    expect(await system.run(taskId)).toBeNull();

    // The dead turn's retry with its key: 409, nothing run or appended.
    const retry = await post(question, 'key-1');
    expect([retry.status, retry.body.code, retry.body.message]).toEqual([
      409,
      WENT_ON.code,
      WENT_ON.message,
    ]);
    expect(await log()).toEqual(expected);
  });
});
