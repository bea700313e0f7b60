import { INestApplication } from '@nestjs/common';
import { createHash, randomBytes } from 'crypto';
import request from 'supertest';
import { LoomEnv, parseEnv } from '@loom/agent-kit';
import {
  ConversationRepository,
  ExecutionStatus,
  SystemRepository,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { createOrchestrator } from '../src/bootstrap';
import { TaskLeases } from '../src/turn/task-run';
const { signJwt } = require('../../../scripts/lib/processes');

/** As TurnService hashes an Idempotency-Key and its message. */
const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 40);

/**
 * A same-key retry of a turn that failed 503 reaches a replica that starts handing its runs over
 * (SIGTERM) while the retry writes the task back into the conversation's active tasks: the task
 * must not be left RUNNING outside the run index, where no recovery scan finds it.
 */
describe('a retry of a failed turn meeting a hand-over (in-process, real stores)', () => {
  let app: INestApplication;
  let env: LoomEnv;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase('loom_retryho');
    const prefix = createTestPrefix('loomretryho');
    env = parseEnv({
      REDIS_URL: TEST_REDIS_URL,
      MYSQL_URL: db.url,
      LOOM_KEY_PREFIX: prefix.prefix,
      LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'warn',
    });
    app = await createOrchestrator(env);
    await app.init();
    cleanup = async () => {
      await app.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup?.());

  it('answers 503 and leaves the task FAILED, not RUNNING and unindexed', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = app.get(ConversationRepository, { strict: false });
    const tasks = app.get(TaskRepository, { strict: false });
    const system = app.get(SystemRepository, { strict: false });
    const leases = app.get(TaskLeases, { strict: false });
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Is my non-compete clause valid?';
    const taskId = 't_retryhandover01';
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
    const failed: TaskSession = {
      taskId,
      conversationId: id,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: 'consultation',
      userIntent: question,
      intent: 'ghost-law',
      plan: [{ agentType: 'ghost-law', required: true, dependsOn: [] }],
      status: TaskStatus.FAILED,
      executions: [
        {
          agentSessionId: 'a_retryhandover01',
          agentType: 'ghost-law',
          status: ExecutionStatus.FAILED,
          attempts: 1,
          startedAt: new Date().toISOString(),
          completedAt: new Date().toISOString(),
          error: { code: 'TIMEOUT', message: 'ghost-law did not answer in time' },
          context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
          output: null,
          usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
        },
      ],
      userSeq: user.seq,
      replySeq: null,
      idempotencyKey: sha('key-1'),
      lease: null,
      createdAt: new Date().toISOString(),
      completedAt: new Date().toISOString(),
      error: { code: 'TIMEOUT', message: 'required agent ghost-law failed: no answer in time' },
    };
    await tasks.create(owner, failed);
    await conversations.save(owner, { ...meta, messageCount: 1 });

    // SIGTERM lands while the retry puts the task back into the conversation's active tasks.
    const save = conversations.save.bind(conversations);
    const spy = jest
      .spyOn(conversations, 'save')
      .mockImplementationOnce(async (...args: Parameters<typeof save>) => {
        await save(...args);
        await leases.handOverAll();
      });
    const res = await request(app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, env.LOOM_JWT_SECRET)}`)
      .set('idempotency-key', 'key-1')
      .send({ content: question });
    spy.mockRestore();
    expect([res.status, res.body.code]).toEqual([503, 'UNAVAILABLE']);
    const task = await tasks.get(owner, id, taskId, true);
    // FAILED, in the active tasks: the next turn or a retry tidies it (or retries it) under the
    // lock. RUNNING would need the run index for the scan to find it.
    expect({
      status: task?.status,
      indexed: (await system.run(taskId)) !== null,
      active: (await conversations.get(owner, id, true)).activeTaskIds,
    }).toEqual({ status: TaskStatus.FAILED, indexed: false, active: [taskId] });
  });
});
