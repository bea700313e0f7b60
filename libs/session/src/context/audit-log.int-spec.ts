import { createTestDatabase } from '@loom/testing';
import { ConversationRepository } from '../conversation/conversation.repository';
import { TaskRepository } from '../conversation/task.repository';
import { LoomError } from '../errors/session-error';
import { newId } from '../ids';
import { ExecutionStatus, TaskSession, TaskStatus } from '../model/task.model';
import { openSessionDataSource } from '../store/mysql/data-source';
import { MysqlSessionStore } from '../store/mysql/mysql-session.store';
import { SessionContext } from './session-context';
import { SharedContextAcl, StoreAuditLog } from './shared-acl';

const tenantId = newId('t');
const alice = { tenantId, userId: 'alice' };
const bob = { tenantId, userId: 'bob' };

function runningTask(conversationId: string): TaskSession {
  return {
    taskId: newId('t'),
    conversationId,
    tenantId,
    userId: alice.userId,
    taskType: 'follow-up',
    userIntent: 'q',
    intent: 'labor-law',
    plan: [{ agentType: 'legal-research', required: false, dependsOn: [] }],
    status: TaskStatus.RUNNING,
    executions: [],
    userSeq: 1,
    replySeq: null,
    idempotencyKey: null,
    lease: null,
    createdAt: new Date().toISOString(),
    completedAt: null,
    error: null,
  };
}

/**
 * An agent's audit entries are writes into the conversation like its other writes: they used
 * to be the only ones made without the execution's guard, so an agent still running after its
 * conversation was deleted put its entry (task id, agent type, key) into the conversation another
 * user of the tenant had since created under the same id.
 */
describe('the ACL audit trail and a conversation re-created under its id (MySQL)', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let store: MysqlSessionStore;

  beforeAll(async () => {
    db = await createTestDatabase('loom_auditfence');
    store = new MysqlSessionStore(await openSessionDataSource({ url: db.url }));
  });
  afterAll(async () => {
    await store?.close();
    await db?.drop();
  });

  it("a late agent's audit entry does not land in the new owner's conversation", async () => {
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    const tasks = new TaskRepository(store);
    const audit = new StoreAuditLog(store);
    const acl = new SharedContextAcl({ '*': { 'protected.verdict': ['labor-law'] } }, { audit });
    const convId = (await conversations.create(alice)).meta.conversationId;
    const task = runningTask(convId);
    await tasks.create(alice, task);
    const agentSessionId = newId('a');
    const assignment = {
      owner: alice,
      conversationId: convId,
      taskId: task.taskId,
      agentSessionId,
      agentType: 'legal-research',
      agentId: 'instance-1',
    };
    const ctx = await SessionContext.build(
      { conversations, tasks, acl },
      assignment,
      { historyTokens: 1000, maxMessages: 10 },
      {
        ...assignment,
        status: ExecutionStatus.RUNNING,
        attempts: 1,
        lastError: null,
        localMemory: {},
        toolCalls: [],
        messages: [],
        output: null,
        startedAt: new Date().toISOString(),
        completedAt: null,
      },
    );
    const denied = (p: Promise<unknown>) =>
      p.then(
        () => 'OK',
        (err: unknown) => (LoomError.is(err) ? err.code : String(err)),
      );
    // While its task runs, a denied write is audited in the conversation.
    expect(await denied(ctx.putSharedData('protected.verdict', 'x'))).toBe('ACCESS_DENIED');
    expect((await audit.entries(alice, convId)).map((e) => e.decision)).toEqual(['DENIED']);

    await conversations.delete(alice, convId);
    expect((await conversations.create(bob, convId)).created).toBe(true);
    expect(await denied(ctx.putSharedData('protected.verdict', 'y'))).not.toBe('OK');
    expect(await audit.entries(bob, convId)).toEqual([]);
  });

  // An audit entry is read beside the task's times (the SharedClock's): it is stamped on the
  // deployment's clock too, not on the agent host's, which may be minutes off.
  it("stamps an audit entry on the deployment's clock, as the shared writes it decides on", async () => {
    const deployment = Date.parse('2030-01-02T03:04:05.678Z'); // far from this host's clock
    const clock = { now: () => deployment };
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30, clock });
    const tasks = new TaskRepository(store);
    const audit = new StoreAuditLog(store);
    const acl = new SharedContextAcl({ '*': { 'protected.verdict': ['labor-law'] } }, { audit });
    const convId = (await conversations.create(alice)).meta.conversationId;
    const task = runningTask(convId);
    await tasks.create(alice, task);
    const assignment = {
      owner: alice,
      conversationId: convId,
      taskId: task.taskId,
      agentSessionId: newId('a'),
      agentType: 'legal-research',
      agentId: 'instance-1',
    };
    const ctx = await SessionContext.build(
      { conversations, tasks, acl },
      assignment,
      { historyTokens: 1000, maxMessages: 10 },
      {
        ...assignment,
        status: ExecutionStatus.RUNNING,
        attempts: 1,
        lastError: null,
        localMemory: {},
        toolCalls: [],
        messages: [],
        output: null,
        startedAt: new Date(deployment).toISOString(),
        completedAt: null,
      },
    );
    await ctx.putSharedData('protected.verdict', 'x').catch(() => undefined);
    expect((await audit.entries(alice, convId)).map((e) => [e.decision, e.at])).toEqual([
      ['DENIED', new Date(deployment).toISOString()],
    ]);
  });
});
