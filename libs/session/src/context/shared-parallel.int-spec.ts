import { createTestDatabase, PrivateRedisServer, sleep } from '@loom/testing';
import { ConversationRepository } from '../conversation/conversation.repository';
import { TaskRepository, foldShared } from '../conversation/task.repository';
import { newId } from '../ids';
import {
  AgentExecutionRecord,
  ExecutionStatus,
  TaskSession,
  TaskStatus,
} from '../model/task.model';
import { StateKeys } from '../model/state-keys';
import { createSessionInfra } from '../session.providers';
import { DEFAULT_TTL } from '../config/session-options';
import { TieredSessionStore } from '../store/tiered/tiered-session.store';
import { SessionContext } from './session-context';
import { SharedContextAcl } from './shared-acl';

const AGENTS = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'];

/** One process's view: its own tiered store (own LRU) over the suite's MySQL and Redis. */
async function processInfra(mysqlUrl: string, redisUrl: string, prefix: string) {
  const infra = await createSessionInfra({
    profile: 'distributed',
    mysqlUrl,
    redisUrl,
    keyPrefix: prefix,
    migrationsRun: true,
    dataDir: '',
    ttl: DEFAULT_TTL,
    idleExpiryDays: 30,
    lockTtlMs: 30_000,
    lockWaitMs: 200,
    lruMax: 1000,
    lruTtlMs: 1000,
    redisCallTimeoutMs: 1000,
  });
  return {
    infra,
    conversations: new ConversationRepository(infra.store, { idleExpiryDays: 30 }),
    tasks: new TaskRepository(infra.store),
  };
}

type Proc = Awaited<ReturnType<typeof processInfra>>;

function runningTask(conversationId: string, owner: { tenantId: string; userId: string }) {
  const task: TaskSession = {
    taskId: newId('t'),
    conversationId,
    tenantId: owner.tenantId,
    userId: owner.userId,
    taskType: 'consultation',
    userIntent: 'q',
    intent: 'parallel',
    plan: AGENTS.map((agentType) => ({ agentType, required: true, dependsOn: [] })),
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
  return task;
}

async function contextFor(p: Proc, task: TaskSession, agentType: string, agentSessionId: string) {
  const owner = { tenantId: task.tenantId, userId: task.userId };
  const assignment = {
    owner,
    conversationId: task.conversationId,
    taskId: task.taskId,
    agentSessionId,
    agentType,
    agentId: `${agentType}-1`,
  };
  return SessionContext.build(
    { conversations: p.conversations, tasks: p.tasks, acl: new SharedContextAcl() },
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
}

function completed(ctx: SessionContext): AgentExecutionRecord {
  return {
    agentSessionId: ctx.assignment.agentSessionId,
    agentType: ctx.assignment.agentType,
    status: ExecutionStatus.COMPLETED,
    attempts: 1,
    startedAt: new Date().toISOString(),
    completedAt: new Date().toISOString(),
    error: null,
    context: ctx.report(),
    output: 'done',
    usage: { promptTokens: 0, completionTokens: 0, totalTokens: 0, costUsd: 0 },
    sharedKeysWritten: ctx.sharedKeysWritten,
    delivery: ctx.delivery,
  } as AgentExecutionRecord;
}

/**
 * Agents of one task writing its shared context at the same moment, each from its own process
 * (its own tiered store and LRU) over one MySQL and one Redis: nothing lost, nothing torn.
 */
describe('task-shared context written by parallel agents (MySQL, Redis)', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let redis: PrivateRedisServer;
  const prefix = 'loomshared:';
  const procs: Proc[] = [];
  const owner = { tenantId: newId('t'), userId: 'alice' };

  beforeAll(async () => {
    db = await createTestDatabase('loom_sharedpar');
    redis = await PrivateRedisServer.start();
    for (let i = 0; i < 3; i++) procs.push(await processInfra(db.url, redis.url, prefix));
  });
  afterAll(async () => {
    for (const p of procs) await p.infra.close();
    await redis?.kill();
    await db?.drop();
  });

  async function seed(): Promise<TaskSession> {
    const convId = (await procs[0].conversations.create(owner)).meta.conversationId;
    const task = runningTask(convId, owner);
    await procs[0].tasks.create(owner, task);
    return task;
  }

  it('keeps every write, each once, at contiguous indexes, with its writer, in MySQL and Redis', async () => {
    const task = await seed();
    const ctxs = await Promise.all(
      AGENTS.map((type, i) => contextFor(procs[i % procs.length], task, type, newId('a'))),
    );
    const ROUNDS = 5;
    await Promise.all(
      ctxs.map(async (ctx) => {
        for (let r = 0; r < ROUNDS; r++) {
          await ctx.putSharedData('same', `${ctx.assignment.agentType}#${r}`);
          await ctx.putSharedData(`own.${ctx.assignment.agentType}`, r);
        }
      }),
    );
    const sharedKey = StateKeys.shared(task.taskId);
    const tiered = procs[0].infra.store as TieredSessionStore;
    const durable = await tiered.durable.getList<{ key: string; writer: string; value: unknown }>(
      owner,
      task.conversationId,
      sharedKey,
    );
    const total = AGENTS.length * ROUNDS * 2;
    expect(durable.map((w) => w.index)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    for (const w of durable.map((d) => d.value)) {
      if (w.key === 'same') expect(String(w.value).split('#')[0]).toBe(w.writer);
      else expect(w.key).toBe(`own.${w.writer}`);
    }
    for (const p of procs) {
      expect(await p.tasks.sharedWrites(owner, task.conversationId, task.taskId)).toEqual(durable);
    }

    // Every agent recorded COMPLETED: what the task shows is the fold of every write.
    const done = { ...task, executions: ctxs.map(completed) };
    await procs[0].tasks.save(owner, done);
    const view = await procs[1].tasks.sharedFor(owner, { task: done });
    const last = durable.filter((w) => w.value.key === 'same').at(-1)!.value;
    expect(view.same).toMatchObject({ value: last.value, writer: last.writer });
    // Its time is not before that of any write it replaced (each is stamped before it lands).
    const times = durable
      .filter((w) => w.value.key === 'same')
      .map((w) => Date.parse((w.value as unknown as { updatedAt: string }).updatedAt));
    expect(Date.parse(view.same.updatedAt)).toBe(Math.max(...times));
    for (const type of AGENTS)
      expect(view[`own.${type}`]).toMatchObject({ value: ROUNDS - 1, writer: type });
  });

  it('a reader in another process never sees a write that its writer had not finished, nor loses one it had', async () => {
    const task = await seed();
    const writer = await contextFor(procs[0], task, 'alpha', newId('a'));
    let acknowledged = 0;
    let stop = false;
    const writes = (async () => {
      for (let r = 1; r <= 40; r++) {
        await writer.putSharedData('counter', r);
        acknowledged = r;
      }
      stop = true;
    })();
    const seen: number[] = [];
    const reads = (async () => {
      while (!stop) {
        const floor = acknowledged;
        const all = await procs[1].tasks.sharedWrites(owner, task.conversationId, task.taskId);
        const values = all.map((w) => Number(w.value.value));
        // Whole (contiguous indexes), in order, and at least what was acknowledged before the read.
        expect(all.map((w) => w.index)).toEqual(values.map((_, i) => i + 1));
        expect(values).toEqual(values.map((_, i) => i + 1));
        expect(values.length).toBeGreaterThanOrEqual(floor);
        seen.push(values.length);
      }
    })();
    await Promise.all([writes, reads]);
    expect(seen.length).toBeGreaterThan(0);
    const view = foldShared(
      await procs[2].tasks.sharedWrites(owner, task.conversationId, task.taskId),
    );
    expect(view.counter.value).toBe(40);
  });

  it('after Redis restarts empty mid-task, every process comes to read the shared writes whole', async () => {
    const task = await seed();
    const a = await contextFor(procs[0], task, 'alpha', newId('a'));
    const b = await contextFor(procs[1], task, 'beta', newId('a'));
    await Promise.all([a.putSharedData('x', 1), b.putSharedData('y', 2)]);
    // Warm every process's cache.
    for (const p of procs) await p.tasks.sharedWrites(owner, task.conversationId, task.taskId);
    await redis.kill();
    await redis.restart();
    // Writes and reads go on; the breaker may be open for a while, never losing anything.
    await Promise.all([a.putSharedData('x', 3), b.putSharedData('z', 4)]);
    const done = { ...task, executions: [completed(a), completed(b)] };
    await procs[0].tasks.save(owner, done);
    // A process whose connection was not back yet when it wrote missed the Redis half of its
    // write; while it has not dropped the copy it missed (it retries every second), the others
    // may read the list as Redis cached it before. Each comes to read it whole.
    for (const p of procs) {
      let writes = await p.tasks.sharedWrites(owner, task.conversationId, task.taskId);
      for (let waited = 0; writes.length < 4 && waited < 20_000; waited += 200) {
        await sleep(200);
        writes = await p.tasks.sharedWrites(owner, task.conversationId, task.taskId);
      }
      expect(writes.map((w) => w.index)).toEqual([1, 2, 3, 4]);
      const view = foldShared(writes, { task: done });
      expect(Object.fromEntries(Object.entries(view).map(([k, v]) => [k, v.value]))).toEqual({
        x: 3,
        y: 2,
        z: 4,
      });
      const t = await p.tasks.get(owner, task.conversationId, task.taskId, true);
      expect(t?.executions).toHaveLength(2);
    }
  });
});
