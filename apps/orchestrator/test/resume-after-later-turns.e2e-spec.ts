import { INestApplication, INestMicroservice } from '@nestjs/common';
import { createHash, randomBytes } from 'crypto';
import request from 'supertest';
import { bootstrapAgent, LoomEnv, parseEnv } from '@loom/agent-kit';
import {
  ConversationRepository,
  ExecutionStatus,
  SystemRepository,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { LABOR_LAW_DESCRIPTOR } from '../../labor-law-agent/src/labor-law.descriptor';
import { LaborLawHandler } from '../../labor-law-agent/src/labor-law.handler';
import { createOrchestrator } from '../src/bootstrap';
import { TaskRecovery } from '../src/recovery/task-recovery.service';
const { signJwt } = require('../../../scripts/lib/processes');

/** As TurnService hashes an Idempotency-Key and its message. */
const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 40);

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
  let app: INestApplication;
  let agent: INestMicroservice;
  let env: LoomEnv;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase('loom_wenton');
    const prefix = createTestPrefix('loomwenton');
    env = parseEnv({
      REDIS_URL: TEST_REDIS_URL,
      MYSQL_URL: db.url,
      LOOM_KEY_PREFIX: prefix.prefix,
      LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'error',
      RECOVERY_INTERVAL_MS: '3600000', // the test runs the scan itself
    });
    agent = await bootstrapAgent(LABOR_LAW_DESCRIPTOR, LaborLawHandler, env);
    app = await createOrchestrator(env);
    await app.init();
    cleanup = async () => {
      await app.close();
      await agent.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup?.());

  it('fails the task instead of replying after the later turn; its key answers 409', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = app.get(ConversationRepository, { strict: false });
    const tasks = app.get(TaskRepository, { strict: false });
    const system = app.get(SystemRepository, { strict: false });
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
    const task: TaskSession = {
      taskId,
      conversationId: id,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: 'consultation',
      userIntent: question,
      intent: 'labor-law',
      plan: [{ agentType: 'labor-law', required: true, dependsOn: [] }],
      status: TaskStatus.RUNNING,
      executions: [
        {
          agentSessionId: 'a_wentonpast00001',
          agentType: 'labor-law',
          status: ExecutionStatus.RUNNING,
          attempts: 1,
          startedAt: createdAt,
          completedAt: null,
          error: null,
          context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
          output: null,
          usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
        },
      ],
      userSeq: 1,
      replySeq: null,
      idempotencyKey: sha('key-1'),
      // Its lease ran out since: the scan finds it due.
      lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
      createdAt,
      completedAt: null,
      error: null,
    };
    await tasks.create(owner, task);

    // The next turn goes ahead: the task is not among the conversation's active tasks.
    const post = (content: string, key?: string) => {
      const req = request(app.getHttpServer())
        .post(`/v1/conversations/${id}/messages`)
        .set(
          'authorization',
          `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, env.LOOM_JWT_SECRET)}`,
        );
      return (key ? req.set('idempotency-key', key) : req).send({ content });
    };
    const later = await post('试用期可以随时解除劳动合同吗');
    expect(later.status).toBe(201);
    expect([later.body.userMessage.seq, later.body.reply.seq]).toEqual([2, 3]);

    const report = await app.get(TaskRecovery, { strict: false }).scan();

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
