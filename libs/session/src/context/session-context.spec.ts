import { ConversationRepository } from '../conversation/conversation.repository';
import { TaskRepository } from '../conversation/task.repository';
import { LoomError } from '../errors/session-error';
import { newId } from '../ids';
import { AgentSession } from '../model/agent.model';
import { ExecutionStatus, TaskSession, TaskStatus } from '../model/task.model';
import { MemorySessionStore } from '../store/memory/memory-session.store';
import {
  MAX_MEMORY_JSON_CHARS,
  MAX_SHARED_KEYS,
  MAX_SHARED_VALUE_JSON_CHARS,
} from './context-limits';
import { Assignment, SessionContext } from './session-context';
import { SharedContextAcl, StoreAuditLog } from './shared-acl';

const owner = { tenantId: 't1', userId: 'u1' };

function task(conversationId: string, taskType = 'follow-up'): TaskSession {
  return {
    taskId: newId('t'),
    conversationId,
    tenantId: owner.tenantId,
    userId: owner.userId,
    taskType,
    userIntent: 'my contract has a problem',
    intent: 'labor-law',
    plan: [
      { agentType: 'legal-research', required: false, dependsOn: [] },
      { agentType: 'labor-law', required: true, dependsOn: ['legal-research'] },
    ],
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

function agentFor(a: Omit<Assignment, 'owner' | 'agentId'>): AgentSession {
  return {
    agentSessionId: a.agentSessionId,
    conversationId: a.conversationId,
    taskId: a.taskId,
    agentId: 'instance-1',
    agentType: a.agentType,
    status: ExecutionStatus.RUNNING,
    attempts: 1,
    lastError: null,
    localMemory: {},
    toolCalls: [],
    messages: [],
    output: null,
    startedAt: new Date().toISOString(),
    completedAt: null,
  };
}

/** As the orchestrator records an execution that succeeded: its writes are shown from then on. */
async function succeeded(tasks: TaskRepository, t: TaskSession, ctx: SessionContext) {
  const { agentSessionId, agentType } = ctx.assignment;
  t.executions.push({
    agentSessionId,
    agentType,
    status: ExecutionStatus.COMPLETED,
    attempts: 1,
    startedAt: new Date().toISOString(),
    completedAt: new Date().toISOString(),
    error: null,
    context: ctx.report(),
    output: 'done',
    usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
    delivery: ctx.delivery,
  });
  await tasks.save(owner, t);
}

const code = async (p: Promise<unknown> | (() => unknown)) => {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    return LoomError.is(err) ? err.code : String(err);
  }
  return 'OK';
};

describe('SessionContext: the assignment bounds what an agent touches', () => {
  const store = new MemorySessionStore();
  const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
  const tasks = new TaskRepository(store);
  const audit = new StoreAuditLog(store);
  const overwrites: unknown[] = [];
  const acl = new SharedContextAcl(
    { 'follow-up': { 'research.statutes': ['labor-law'] }, '*': { final_decision: ['labor-law'] } },
    {
      audit,
      redactValue: (v) => JSON.parse(JSON.stringify(v).replace(/\d{11}/g, '[REDACTED_PHONE]')),
    },
  );
  const deps = { conversations, tasks, acl, onOverwrite: (e: unknown) => overwrites.push(e) };
  let convId: string;
  let t: TaskSession;

  const build = (
    agentType: string,
    over: Partial<Assignment> = {},
    agent?: Partial<AgentSession>,
  ) => {
    const a: Assignment = {
      owner,
      conversationId: convId,
      taskId: t.taskId,
      agentSessionId: newId('a'),
      agentType,
      agentId: 'instance-1',
      ...over,
    };
    return SessionContext.build(
      deps,
      a,
      { historyTokens: 1000, maxMessages: 10 },
      {
        ...agentFor(a),
        ...agent,
      },
    );
  };

  beforeAll(async () => {
    convId = (await conversations.create(owner)).meta.conversationId;
    await conversations.appendMessage(owner, convId, {
      role: 'user',
      content: 'my contract has a problem',
      agentType: null,
      taskId: null,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });
    t = task(convId);
    await tasks.create(owner, t);
  });

  it('denies a protected key to an undeclared writer, typed and audited, and stores nothing', async () => {
    const research = await build('legal-research');
    expect(await code(research.putSharedData('research.statutes', ['art. 1']))).toBe(
      'ACCESS_DENIED',
    );
    expect(await code(research.putSharedData('protected.verdict', 'x'))).toBe('ACCESS_DENIED');
    expect(await tasks.shared(owner, convId, t.taskId)).toEqual({});
    const entries = await audit.entries(owner, convId);
    expect(entries.map((e) => [e.agentType, e.key, e.decision])).toEqual([
      ['legal-research', 'research.statutes', 'DENIED'],
      ['legal-research', 'protected.verdict', 'DENIED'],
    ]);
    expect(entries[0]).toMatchObject({ taskId: t.taskId, previousWriter: null });
    expect(Date.parse(entries[0].at)).not.toBeNaN();
  });

  it('lets the declared writer through (audited as ALLOWED) and redacts stored values when configured', async () => {
    const labor = await build('labor-law');
    await labor.putSharedData('research.statutes', { note: 'call 13800138000' });
    const shared = await tasks.shared(owner, convId, t.taskId);
    expect(shared['research.statutes']).toMatchObject({
      writer: 'labor-law',
      value: { note: 'call [REDACTED_PHONE]' },
    });
    expect((await audit.entries(owner, convId)).at(-1)).toMatchObject({
      agentType: 'labor-law',
      key: 'research.statutes',
      decision: 'ALLOWED',
    });
  });

  it("reports an overwrite of another agent's key with both agents, and audits it", async () => {
    const research = await build('legal-research');
    await research.putSharedData('notes', 'from research');
    await succeeded(tasks, t, research);
    const labor = await build('labor-law');
    await labor.putSharedData('notes', 'from labor');
    expect(overwrites).toEqual([
      { key: 'notes', writer: 'labor-law', previousWriter: 'legal-research', taskId: t.taskId },
    ]);
    expect((await audit.entries(owner, convId)).at(-1)).toMatchObject({
      agentType: 'labor-law',
      key: 'notes',
      decision: 'OVERWRITE',
      previousWriter: 'legal-research',
    });
  });

  it('treats shared keys and memory keys named like Object members as any other key', async () => {
    const research = await build('legal-research');
    expect(research.getSharedData('constructor')).toBeUndefined();
    await research.putSharedData('constructor', 'c');
    await research.putSharedData('toString', 't');
    await research.putSharedData('__proto__', { v: 'p' });
    await succeeded(tasks, t, research);
    const labor = await build('labor-law');
    expect(labor.getSharedData('constructor')).toBe('c');
    expect(labor.getSharedData('__proto__')).toEqual({ v: 'p' });
    expect(labor.getSharedData('valueOf')).toBeUndefined();
    const shared = await tasks.shared(owner, convId, t.taskId);
    expect(Object.keys(shared)).toEqual(
      expect.arrayContaining(['constructor', 'toString', '__proto__']),
    );
    expect(shared['__proto__' as string]).toMatchObject({ value: { v: 'p' } });
    labor.remember('__proto__', { secret: 1 });
    expect(Object.keys(labor.getAgentMemory())).toContain('__proto__');
  });

  it('refuses shared key names that carry free text or, with stored redaction, personal data', async () => {
    const fresh = task(convId);
    await tasks.create(owner, fresh);
    const research = await build('legal-research', { taskId: fresh.taskId });
    const auditedBefore = (await audit.entries(owner, convId)).length;
    for (const key of [
      'alice@example.com',
      'note for Alice Zhang',
      '张三的合同',
      'line\nbreak',
      'protected.alice@example.com',
      'caller.13800138000',
    ])
      expect([key, await code(research.putSharedData(key, 1))]).toEqual([key, 'VALIDATION_FAILED']);
    expect(await tasks.shared(owner, convId, fresh.taskId)).toEqual({});
    expect(await audit.entries(owner, convId)).toHaveLength(auditedBefore);
    await research.putSharedData('research.case-1:2024_v2', 1); // an identifier passes
  });

  it('bounds shared writes (key, value, key count) and refuses values JSON cannot hold, writing nothing', async () => {
    const fresh = task(convId);
    await tasks.create(owner, fresh);
    const research = await build('legal-research', { taskId: fresh.taskId });
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(await code(research.putSharedData('', 1))).toBe('VALIDATION_FAILED');
    expect(await code(research.putSharedData('k'.repeat(257), 1))).toBe('VALIDATION_FAILED');
    expect(await code(research.putSharedData('big', 'b'.repeat(MAX_SHARED_VALUE_JSON_CHARS)))).toBe(
      'PAYLOAD_TOO_LARGE',
    );
    expect(await code(research.putSharedData('bigint', { n: 1n }))).toBe('VALIDATION_FAILED');
    expect(await code(research.putSharedData('circular', circular))).toBe('VALIDATION_FAILED');
    expect(await tasks.shared(owner, convId, fresh.taskId)).toEqual({});
    for (let i = 0; i < MAX_SHARED_KEYS; i++) await research.putSharedData(`k${i}`, i);
    expect(await code(research.putSharedData('one-more', 1))).toBe('PAYLOAD_TOO_LARGE');
    await research.putSharedData('k0', 'rewritten'); // an existing key may still be written
    expect(Object.keys(await tasks.shared(owner, convId, fresh.taskId))).toHaveLength(
      MAX_SHARED_KEYS,
    );
  });

  it('bounds a shared value as it is stored: redacted (LOOM_REDACT_STORED), not as sent', async () => {
    const research = await build('legal-research');
    // 220,002 characters of JSON as sent; 320,002 once every 11 digits read [REDACTED_PHONE].
    const phones = '13800138000'.repeat(20_000);
    expect(await code(research.putSharedData('phones', phones))).toBe('PAYLOAD_TOO_LARGE');
    expect(Object.hasOwn(await tasks.shared(owner, convId, t.taskId), 'phones')).toBe(false);
  });

  it('counts private memory exactly, serialising only what each call remembers', async () => {
    const labor = await build('labor-law', {}, { localMemory: { kept: 'from before' } });
    const stringify = jest.spyOn(JSON, 'stringify');
    try {
      for (let i = 0; i < 50; i++) labor.remember(`k${i}`, 'v'.repeat(100));
      labor.remember('k0', undefined); // JSON leaves it out
      labor.remember('__proto__', { n: 1 });
      const memory = labor.getAgentMemory();
      expect(stringify.mock.calls.filter(([v]) => v === memory).length).toBeLessThanOrEqual(1);
      // Up to the last character: exactly the limit is taken, one more is refused.
      const used = JSON.stringify(memory).length;
      const room = MAX_MEMORY_JSON_CHARS - used - ',"last":""'.length;
      labor.remember('last', 'l'.repeat(room));
      expect(JSON.stringify(labor.getAgentMemory()).length).toBe(MAX_MEMORY_JSON_CHARS);
      expect(await code(() => labor.remember('last', 'l'.repeat(room + 1)))).toBe(
        'PAYLOAD_TOO_LARGE',
      );
      labor.remember('k1', undefined);
      labor.remember('last', 'l'.repeat(room + 107)); // k1's ,"k1":"v…" (108) is free again
      expect(JSON.stringify(labor.getAgentMemory()).length).toBe(MAX_MEMORY_JSON_CHARS - 1);
    } finally {
      stringify.mockRestore();
    }
  });

  it('bounds private memory, keeping the earlier value of a key refused', async () => {
    const labor = await build('labor-law');
    labor.remember('note', 'small');
    expect(await code(() => labor.remember('note', 'm'.repeat(MAX_MEMORY_JSON_CHARS)))).toBe(
      'PAYLOAD_TOO_LARGE',
    );
    expect(await code(() => labor.remember('n', { n: 1n }))).toBe('VALIDATION_FAILED');
    expect(labor.getAgentMemory()).toEqual({ note: 'small' });
  });

  it('refuses a task of another conversation, an agent type outside the plan and a mismatched agent session', async () => {
    const other = (await conversations.create(owner)).meta.conversationId;
    const otherTask = task(other);
    await tasks.create(owner, otherTask);
    // a task id of another conversation is not in this conversation's partition
    expect(await code(build('labor-law', { taskId: otherTask.taskId }))).toBe('NOT_FOUND');
    expect(await code(build('contract-law'))).toBe('ACCESS_DENIED');
    expect(await code(build('labor-law', {}, { conversationId: other }))).toBe('ACCESS_DENIED');
    expect(await code(build('labor-law', {}, { taskId: otherTask.taskId }))).toBe('ACCESS_DENIED');
    expect(await code(build('labor-law', {}, { agentType: 'legal-research' }))).toBe(
      'ACCESS_DENIED',
    );
    // a task the caller read itself must be the assigned one
    const a: Assignment = {
      owner,
      conversationId: convId,
      taskId: t.taskId,
      agentSessionId: newId('a'),
      agentType: 'labor-law',
      agentId: 'instance-1',
    };
    const budget = { historyTokens: 1000, maxMessages: 10 };
    expect(
      await code(
        SessionContext.build(deps, a, budget, agentFor(a), { ...t, taskId: otherTask.taskId }),
      ),
    ).toBe('ACCESS_DENIED');
    expect(
      await code(SessionContext.build(deps, a, budget, agentFor(a), { ...t, userId: 'u2' })),
    ).toBe('ACCESS_DENIED');
    expect((await SessionContext.build(deps, a, budget, agentFor(a), t)).task.taskId).toBe(
      t.taskId,
    );
    // another tenant or user: the conversation does not exist for them
    expect(await code(build('labor-law', { owner: { tenantId: 't2', userId: 'u1' } }))).toBe(
      'NOT_FOUND',
    );
    expect(await code(build('labor-law', { owner: { tenantId: 't1', userId: 'u2' } }))).toBe(
      'NOT_FOUND',
    );
  });

  it('keeps private memory private and refuses ids outside the assignment', async () => {
    const ctx = await build('labor-law');
    ctx.remember('draft', 1);
    expect(ctx.getAgentMemory()).toEqual({ draft: 1 });
    expect(await code(() => ctx.getAgentMemory(newId('a')))).toBe('ACCESS_DENIED');
    expect(await code(() => ctx.assertInScope({ conversationId: newId('c') }))).toBe(
      'ACCESS_DENIED',
    );
    expect(await code(() => ctx.assertInScope({ taskId: newId('t') }))).toBe('ACCESS_DENIED');
    expect(
      await code(() =>
        ctx.assertInScope({
          conversationId: convId,
          taskId: t.taskId,
          agentSessionId: ctx.assignment.agentSessionId,
        }),
      ),
    ).toBe('OK');
  });
});

describe('SessionContext: agents of parallel steps writing one shared key', () => {
  it("audits the overwrite of another agent's value written between its read and its write", async () => {
    const store = new MemorySessionStore();
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    const tasks = new TaskRepository(store);
    const audit = new StoreAuditLog(store);
    const overwrites: unknown[] = [];
    const deps = {
      conversations,
      tasks,
      acl: new SharedContextAcl({}, { audit }),
      onOverwrite: (e: unknown) => overwrites.push(e),
    };
    const convId = (await conversations.create(owner)).meta.conversationId;
    const t = task(convId);
    t.plan = t.plan.map((s) => ({ ...s, dependsOn: [] })); // one wave: both run at once
    await tasks.create(owner, t);
    const build = (agentType: string) => {
      const a: Assignment = {
        owner,
        conversationId: convId,
        taskId: t.taskId,
        agentSessionId: newId('a'),
        agentType,
        agentId: 'instance-1',
      };
      return SessionContext.build(deps, a, { historyTokens: 1000, maxMessages: 10 }, agentFor(a));
    };
    const research = await build('legal-research');
    const labor = await build('labor-law');
    // Both read the shared list before either writes, as two agents of one wave may.
    const getList = store.getList.bind(store);
    let waiting = 0;
    let bothRead: () => void = () => undefined;
    const read = new Promise<void>((resolve) => (bothRead = resolve));
    jest.spyOn(store, 'getList').mockImplementation(async (...args) => {
      const items = await getList(...(args as Parameters<typeof getList>));
      if (args[2] === `task:${t.taskId}:shared` && waiting < 2) {
        if (++waiting === 2) bothRead();
        await read;
      }
      return items as never;
    });
    await Promise.all([
      research.putSharedData('notes', 'from research'),
      labor.putSharedData('notes', 'from labor'),
    ]);
    const last = (await tasks.shared(owner, convId, t.taskId)).notes.writer;
    const first = last === 'labor-law' ? 'legal-research' : 'labor-law';
    expect(overwrites).toEqual([
      { key: 'notes', writer: last, previousWriter: first, taskId: t.taskId },
    ]);
    expect(await audit.entries(owner, convId)).toEqual([
      expect.objectContaining({
        agentType: last,
        key: 'notes',
        decision: 'OVERWRITE',
        previousWriter: first,
      }),
    ]);
  });
});

describe('SessionContext: a write the ACL denies, whatever else is wrong with it', () => {
  it('is ACCESS_DENIED and audited also on a full task or with an oversized value', async () => {
    const store = new MemorySessionStore();
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    const tasks = new TaskRepository(store);
    const audit = new StoreAuditLog(store);
    const acl = new SharedContextAcl(
      { 'follow-up': { 'research.statutes': ['labor-law'] } },
      { audit },
    );
    const convId = (await conversations.create(owner)).meta.conversationId;
    const t = task(convId);
    await tasks.create(owner, t);
    const a: Assignment = {
      owner,
      conversationId: convId,
      taskId: t.taskId,
      agentSessionId: newId('a'),
      agentType: 'legal-research',
      agentId: 'instance-1',
    };
    const research = await SessionContext.build(
      { conversations, tasks, acl },
      a,
      { historyTokens: 1000, maxMessages: 10 },
      agentFor(a),
    );
    expect(
      await code(
        research.putSharedData('research.statutes', 'b'.repeat(MAX_SHARED_VALUE_JSON_CHARS)),
      ),
    ).toBe('ACCESS_DENIED');
    for (let i = 0; i < MAX_SHARED_KEYS; i++) await research.putSharedData(`k${i}`, i);
    expect(await code(research.putSharedData('research.statutes', ['art. 1']))).toBe(
      'ACCESS_DENIED',
    );
    expect(await code(research.putSharedData('protected.verdict', 'x'))).toBe('ACCESS_DENIED');
    expect((await audit.entries(owner, convId)).map((e) => [e.key, e.decision])).toEqual([
      ['research.statutes', 'DENIED'],
      ['research.statutes', 'DENIED'],
      ['protected.verdict', 'DENIED'],
    ]);
    expect(Object.keys(await tasks.shared(owner, convId, t.taskId))).toHaveLength(MAX_SHARED_KEYS);
  });
});
