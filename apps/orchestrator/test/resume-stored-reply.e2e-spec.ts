import { INestApplication } from '@nestjs/common';
import { createHash, randomBytes } from 'crypto';
import request from 'supertest';
import { LoomEnv, parseEnv } from '@loom/agent-kit';
import {
  ConversationRepository,
  ExecutionStatus,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { createOrchestrator } from '../src/bootstrap';
const { signJwt } = require('../../../scripts/lib/processes');

/** As TurnService hashes an Idempotency-Key and its message. */
const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 40);

/**
 * An orchestrator died after it stored a turn's reply and before it closed the task. The retry
 * (same Idempotency-Key) resumes the task, and its specialist, asked again for its record, is
 * down by now: the turn was answered all the same.
 */
describe('resuming a task whose reply was stored before the crash (in-process, real stores)', () => {
  let app: INestApplication;
  let env: LoomEnv;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase('loom_resume');
    const prefix = createTestPrefix('loomresume');
    env = parseEnv({
      REDIS_URL: TEST_REDIS_URL,
      MYSQL_URL: db.url,
      LOOM_KEY_PREFIX: prefix.prefix,
      LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'warn',
      AGENT_TIMEOUT_MS: '1000',
      AGENT_MAX_EXECUTION_MS: '1000',
      TASK_LEASE_MS: '1000',
    });
    app = await createOrchestrator(env);
    await app.init();
    cleanup = async () => {
      await app.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup?.());

  it('answers the retry with the stored reply, not the error of a step asked again', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = app.get(ConversationRepository, { strict: false });
    const tasks = app.get(TaskRepository, { strict: false });
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Is my non-compete clause valid?';
    const taskId = 't_storedreply0001';
    const user = await conversations.appendMessage(owner, id, {
      role: 'user',
      content: question,
      agentType: null,
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });
    await tasks.rememberIdempotent(owner, id, sha('key-1'), {
      taskId,
      requestHash: sha(question),
      userSeq: user.seq,
    });
    const task: TaskSession = {
      taskId,
      conversationId: id,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: 'consultation',
      userIntent: question,
      intent: 'ghost-law',
      // A specialist no instance runs now: asked again, it times out.
      plan: [{ agentType: 'ghost-law', required: true, dependsOn: [] }],
      status: TaskStatus.RUNNING,
      executions: [
        {
          agentSessionId: 'a_storedreply0001',
          agentType: 'ghost-law',
          status: ExecutionStatus.RUNNING,
          attempts: 1,
          startedAt: new Date().toISOString(),
          completedAt: null,
          error: null,
          context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
          output: null,
          usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
        },
      ],
      userSeq: user.seq,
      replySeq: null,
      idempotencyKey: sha('key-1'),
      lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
      createdAt: new Date().toISOString(),
      completedAt: null,
      error: null,
    };
    await tasks.create(owner, task);
    await conversations.save(owner, { ...meta, activeTaskIds: [taskId] });
    // Its last write: the reply. It died before the conversation update and the completion.
    const reply = await conversations.appendMessage(owner, id, {
      role: 'assistant',
      content: 'The clause is valid only with compensation.',
      agentType: 'ghost-law',
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });

    const res = await request(app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, env.LOOM_JWT_SECRET)}`)
      .set('idempotency-key', 'key-1')
      .send({ content: question });
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
    const conversations = app.get(ConversationRepository, { strict: false });
    const tasks = app.get(TaskRepository, { strict: false });
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Can my employer change my salary?';
    const taskId = 't_retriedreply001';
    const user = await conversations.appendMessage(owner, id, {
      role: 'user',
      content: question,
      agentType: null,
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });
    await tasks.rememberIdempotent(owner, id, sha('key-2'), {
      taskId,
      requestHash: sha(question),
      userSeq: user.seq,
    });
    const spent = { promptTokens: 100, completionTokens: 20, costUsd: 0.5 };
    const execution = {
      agentType: 'ghost-law',
      startedAt: new Date().toISOString(),
      context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
      output: null,
    };
    // Its first attempt failed 503 (planner and specialist counted then); a retry reopened it,
    // stored the reply of the step run again and died before it closed the task.
    const task: TaskSession = {
      taskId,
      conversationId: id,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: 'consultation',
      userIntent: question,
      intent: 'ghost-law',
      plan: [{ agentType: 'ghost-law', required: true, dependsOn: [] }],
      status: TaskStatus.RUNNING,
      planUsage: { promptTokens: 7, completionTokens: 3, costUsd: 0.01 },
      countedExecutions: 1,
      executions: [
        {
          ...execution,
          agentSessionId: 'a_retriedfirst001',
          status: ExecutionStatus.FAILED,
          attempts: 1,
          completedAt: new Date().toISOString(),
          error: { code: 'UNAVAILABLE', message: 'the model endpoint is busy' },
          usage: spent,
        },
        {
          ...execution,
          agentSessionId: 'a_retriedagain001',
          status: ExecutionStatus.RUNNING,
          attempts: 1,
          completedAt: null,
          error: null,
          usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
        },
      ],
      userSeq: user.seq,
      replySeq: null,
      idempotencyKey: sha('key-2'),
      lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
      createdAt: new Date().toISOString(),
      completedAt: null,
      error: null,
    };
    await tasks.create(owner, task);
    const counted = { promptTokens: 107, completionTokens: 23, costUsd: 0.51 };
    await conversations.save(owner, {
      ...meta,
      title: 'Salary',
      usage: counted,
      activeTaskIds: [taskId],
    });
    await conversations.appendMessage(owner, id, {
      role: 'assistant',
      content: 'Not without your consent.',
      agentType: 'ghost-law',
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });

    const res = await request(app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, env.LOOM_JWT_SECRET)}`)
      .set('idempotency-key', 'key-2')
      .send({ content: question });
    expect(res.status).toBe(201);
    expect(res.body.reply).toMatchObject({ seq: 2, content: 'Not without your consent.' });
    const after = await conversations.get(owner, id, true);
    expect(after.activeTaskIds).toEqual([]);
    // The step asked again reported nothing: the first attempt's cost is not counted twice.
    expect(after.usage).toEqual(counted);
  });
});
