import { INestApplication } from '@nestjs/common';
import { createHash, randomBytes } from 'crypto';
import request from 'supertest';
import { LoomEnv, parseEnv } from '@loom/agent-kit';
import {
  ConversationRepository,
  ExecutionClaims,
  ExecutionStatus,
  SESSION_INFRA,
  SessionInfra,
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
 * A same-key retry of a turn that failed 503 runs the failed step again under a new
 * agentSessionId. The execution it replaces may still be running on its agent (slow, or paused
 * and resumed): its claim is revoked, so its next write is refused.
 */
describe('a retry of a failed turn revokes the claims of the executions it replaces (in-process, real stores)', () => {
  let app: INestApplication;
  let env: LoomEnv;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase('loom_retryrevoke');
    const prefix = createTestPrefix('loomretryrevoke');
    env = parseEnv({
      REDIS_URL: TEST_REDIS_URL,
      MYSQL_URL: db.url,
      LOOM_KEY_PREFIX: prefix.prefix,
      LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'error',
      // No instance of its specialist runs: the retry's new execution fails 503 again, soon.
      AGENT_TIMEOUT_MS: '1000',
      AGENT_MAX_EXECUTION_MS: '1000',
    });
    app = await createOrchestrator(env);
    await app.init();
    cleanup = async () => {
      await app.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup?.());

  it("refuses the replaced execution's next write, and only its", async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = app.get(ConversationRepository, { strict: false });
    const tasks = app.get(TaskRepository, { strict: false });
    const infra = app.get<SessionInfra>(SESSION_INFRA, { strict: false });
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Is my non-compete clause valid?';
    const taskId = 't_retryrevoke0001';
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
    const record = {
      agentType: 'ghost-law',
      status: ExecutionStatus.FAILED,
      attempts: 1,
      startedAt: new Date().toISOString(),
      completedAt: new Date().toISOString(),
      context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
      output: null,
      usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
    };
    const failed: TaskSession = {
      taskId,
      conversationId: id,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: 'consultation',
      userIntent: question,
      intent: 'ghost-law',
      plan: [
        { agentType: 'ghost-law', required: true, dependsOn: [] },
        { agentType: 'other-law', required: false, dependsOn: [] },
      ],
      status: TaskStatus.FAILED,
      executions: [
        {
          ...record,
          agentSessionId: 'a_retryrevokeold1',
          error: { code: 'TIMEOUT', message: 'ghost-law did not answer in time' },
        },
        // An agent's own failure stands: not run again, its execution not replaced.
        {
          ...record,
          agentType: 'other-law',
          agentSessionId: 'a_retryrevokekept',
          error: { code: 'AGENT_FAILED', message: 'the content filter refused' },
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
    // Both executions still running on their agents, each holding its claim as an agent does.
    const claims = new ExecutionClaims(infra.redis, infra.keys);
    const deadline = Date.now() + 60_000;
    const replaced = await claims.acquire(id, 'a_retryrevokeold1', deadline);
    const kept = await claims.acquire(id, 'a_retryrevokekept', deadline);
    await replaced.confirm();

    const res = await request(app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, env.LOOM_JWT_SECRET)}`)
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
