import { Injectable } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import {
  AgentExecutionRecord,
  emptyUsage,
  ExecutionClaims,
  ExecutionStatus,
  SessionContext,
  StateKeys,
  TaskRepository,
  TaskSession,
  TaskStatus,
  TieredSessionStore,
} from '@loom/session';
import { AgentHandler } from './agent-handler';

/** Holds every execution at a gate the test opens, then writes one shared key. */
let gate: Promise<void> = Promise.resolve();
let started: () => void = () => undefined;
/** How the next execution to start meets a failed write: as is, or as its own error. */
let onWriteError: 'rethrow' | 'wrap' = 'rethrow';
/** Told how each execution's write ended: null when it was written, else its error. */
let wrote: (agentSessionId: string, error: unknown) => void = () => undefined;

@Injectable()
class GatedWriter implements AgentHandler {
  async handle(ctx: SessionContext) {
    const mode = onWriteError;
    started();
    await gate;
    const { agentSessionId } = ctx.assignment;
    await ctx.putSharedData('finding', `written by ${agentSessionId}`).then(
      () => wrote(agentSessionId, null),
      (err) => {
        wrote(agentSessionId, err);
        throw mode === 'wrap' ? new Error('the model call failed') : err;
      },
    );
    return { answer: 'done', usage: emptyUsage(), sharedKeysWritten: [] };
  }
}

const DESCRIPTOR = {
  agentType: 'gated-writer',
  description: 'test agent: writes one shared key once let through',
  role: 'specialist' as const,
  intents: ['gated-writer'],
  keywords: [],
};

/** An execution as the orchestrator records it when it stopped waiting for the answer. */
function timedOut(agentSessionId: string): AgentExecutionRecord {
  return {
    agentSessionId,
    agentType: DESCRIPTOR.agentType,
    status: ExecutionStatus.FAILED,
    attempts: 1,
    startedAt: new Date().toISOString(),
    completedAt: new Date().toISOString(),
    error: { code: 'TIMEOUT', message: 'no answer in time' },
    context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
    output: null,
    usage: emptyUsage(),
  };
}

/**
 * A delivery that lost its execution claim (cut off from Redis past the claim's TTL) while
 * another delivery took the work over: it must write nothing more and answer nothing, and the
 * delivery holding the claim answers once.
 */
describe('agent runner: a delivery that lost its claim (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, GatedWriter, { AGENT_CLAIM_IDLE_MS: '1000' });
  });
  afterAll(() => agent?.stop());

  it.each(['rethrow', 'wrap'] as const)(
    'writes nothing and withholds its reply; the delivery that took over answers once (handler: %s)',
    async (mode) => {
      onWriteError = mode;
      const task = await agent.seed(owner, [], 'question');
      let open!: () => void;
      gate = new Promise((r) => (open = r));
      const running = new Promise<void>((r) => (started = r));
      const req = agent.request(owner, task);
      const agentSessionId = agent.signer.verify(
        req.assignment,
        DESCRIPTOR.agentType,
      ).agentSessionId;
      const answer = agent.execute(req);
      await running;

      // Another delivery holds the claim now, as after the first one's claim lapsed.
      const claimKey = `${agent.infra.keys.session(task.conversationId)}:claim:${agentSessionId}`;
      const redis = agent.infra.redis!;
      await redis.set(claimKey, 'another-delivery', 'PX', 15_000);
      const again = new Promise<void>((r) => (started = r));
      onWriteError = 'rethrow';
      open();

      // The first delivery stops at its write: no shared row, no agent session, the entry pending.
      // Once the other delivery lets go, the entry is reclaimed (idle 1 s) and runs again.
      await new Promise((r) => setTimeout(r, 300));
      const sharedKey = StateKeys.shared(task.taskId);
      expect(await agent.infra.store.getList(owner, task.conversationId, sharedKey)).toEqual([]);
      expect(await agent.tasks.agentSession(owner, task.conversationId, agentSessionId, true)).toBe(
        null,
      );
      await redis.del(claimKey);
      await again;

      const result = await answer;
      expect(result).toMatchObject({ agentSessionId, output: 'done', replayed: false });
      const rows = await agent.infra.store.getList(owner, task.conversationId, sharedKey);
      expect(rows).toHaveLength(1);
      const session = await agent.tasks.agentSession(
        owner,
        task.conversationId,
        agentSessionId,
        true,
      );
      expect(session).toMatchObject({ status: 'COMPLETED', attempts: 1 });
    },
  );
});

/**
 * A request of an execution its task already recorded as failed (a late delivery, after the
 * orchestrator stopped waiting): when the task is retried, the step runs again under a new
 * agentSessionId, and the late one must not run beside it.
 */
describe('agent runner: an execution its task recorded as failed (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-b', userId: 'bob' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, GatedWriter);
  });
  afterAll(() => agent?.stop());

  it('is refused with CONFLICT and writes nothing; a new execution of the step runs', async () => {
    gate = Promise.resolve();
    const task = await agent.seed(owner, [], 'question');
    const late = agent.request(owner, task);
    const { agentSessionId } = agent.signer.verify(late.assignment, DESCRIPTOR.agentType);
    task.executions = [timedOut(agentSessionId)];
    await agent.tasks.save(owner, task);

    await expect(agent.execute(late)).rejects.toMatchObject({
      code: 'CONFLICT',
      message: 'the task recorded this execution as failed',
    });
    const sharedKey = StateKeys.shared(task.taskId);
    expect(await agent.infra.store.getList(owner, task.conversationId, sharedKey)).toEqual([]);
    expect(await agent.tasks.agentSession(owner, task.conversationId, agentSessionId, true)).toBe(
      null,
    );

    const retried = await agent.execute(agent.request(owner, task));
    expect(retried).toMatchObject({ output: 'done', replayed: false });
    expect(await agent.infra.store.getList(owner, task.conversationId, sharedKey)).toHaveLength(1);
  });
});

/**
 * An execution still working when the orchestrator gave up on it (a slow agent, or one paused
 * and resumed): once a retry of the task has replaced it with a new execution and revoked its
 * claim, its writes are refused, whichever comes first.
 */
describe('agent runner: an execution a retry replaced while it ran (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-c', userId: 'carol' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, GatedWriter);
  });
  afterAll(() => agent?.stop());

  it('writes neither shared keys nor its agent session beside the new execution', async () => {
    onWriteError = 'rethrow';
    const task = await agent.seed(owner, [], 'question');
    let open!: () => void;
    gate = new Promise((r) => (open = r));
    const running = new Promise<void>((r) => (started = r));
    const old = agent.request(owner, task);
    const oldId = agent.signer.verify(old.assignment, DESCRIPTOR.agentType).agentSessionId;
    void agent.execute(old).catch(() => undefined); // it answers nothing: see below
    await running;

    // The retry: the old execution recorded FAILED, its claim revoked, a new one run to its end.
    task.executions = [timedOut(oldId)];
    await agent.tasks.save(owner, task);
    await new ExecutionClaims(agent.infra.redis, agent.infra.keys).revoke(task.conversationId, [
      oldId,
    ]);
    gate = Promise.resolve();
    const retried = await agent.execute(agent.request(owner, task));
    const sharedKey = StateKeys.shared(task.taskId);
    const rows = await agent.infra.store.getList(owner, task.conversationId, sharedKey);
    expect(rows).toEqual([
      {
        index: 1,
        value: {
          key: 'finding',
          value: `written by ${retried.agentSessionId}`,
          writer: DESCRIPTOR.agentType,
          updatedAt: expect.any(String),
          execution: retried.agentSessionId,
          delivery: retried.delivery,
        },
      },
    ]);

    // The old execution goes on, and its write is refused.
    const refused = new Promise<unknown>((r) => (wrote = (id, err) => id === oldId && r(err)));
    open();
    expect(await refused).toMatchObject({
      code: 'SUPERSEDED',
      message: 'a retry of its task replaced this execution: nothing more is written',
    });
    expect(await agent.infra.store.getList(owner, task.conversationId, sharedKey)).toEqual(rows);
    expect(await agent.tasks.agentSession(owner, task.conversationId, oldId, true)).toBe(null);
    expect(
      await agent.tasks.agentSession(owner, task.conversationId, retried.agentSessionId, true),
    ).toMatchObject({ status: 'COMPLETED', attempts: 1 });
  });
});

/**
 * A write whose claim check passed a moment before its execution was given up: the write itself
 * re-checks the task in its own MySQL statement, so it lands only while the task still runs it.
 */
describe('agent runner: a write racing the end of its execution (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-d', userId: 'dave' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, GatedWriter);
  });
  afterAll(() => agent?.stop());
  afterEach(() => jest.restoreAllMocks());

  /** Runs one execution whose shared write meets `meanwhile` between its claim check and itself. */
  async function racedWrite(meanwhile: (task: TaskSession, agentSessionId: string) => unknown) {
    gate = Promise.resolve();
    onWriteError = 'rethrow';
    const task = await agent.seed(owner, [], 'question');
    const req = agent.request(owner, task);
    const { agentSessionId } = agent.signer.verify(req.assignment, DESCRIPTOR.agentType);
    const append = TaskRepository.prototype.appendShared;
    jest.spyOn(TaskRepository.prototype, 'appendShared').mockImplementationOnce(async function (
      this: TaskRepository,
      ...args
    ) {
      await meanwhile(task, agentSessionId);
      return append.apply(this, args);
    });
    const written = new Promise<unknown>(
      (r) => (wrote = (id, err) => id === agentSessionId && r(err)),
    );
    void agent.execute(req).catch(() => undefined); // a refused write answers nothing
    return { task, agentSessionId, written: await written };
  }

  it('a retry that revoked the claim after its check: the write is refused', async () => {
    const { task, agentSessionId, written } = await racedWrite(async (t, id) => {
      await agent.tasks.save(owner, { ...t, executions: [timedOut(id)] });
      await new ExecutionClaims(agent.infra.redis, agent.infra.keys).revoke(t.conversationId, [id]);
    });
    expect(written).toMatchObject({ code: 'SUPERSEDED' });
    const sharedKey = StateKeys.shared(task.taskId);
    expect(await agent.infra.store.getList(owner, task.conversationId, sharedKey)).toEqual([]);
    expect(await agent.tasks.agentSession(owner, task.conversationId, agentSessionId, true)).toBe(
      null,
    );
  });

  it('its conversation deleted after the check: nothing is written back into it', async () => {
    const { task, agentSessionId, written } = await racedWrite((t) =>
      agent.conversations.delete(owner, t.conversationId),
    );
    expect(written).toMatchObject({ code: 'SUPERSEDED' });
    const durable = (agent.infra.store as TieredSessionStore).durable;
    expect(await durable.listSessionKeys(owner, task.conversationId)).toEqual([]);
    expect(
      await agent.tasks.agentSession(owner, task.conversationId, agentSessionId, true),
    ).toBeNull();
  });
});

/**
 * A delivery whose agent was paused (SIGSTOP, simulated by holding its handler) while its task
 * completed without it and removed its agent sessions (issue 4: an agent session left in Redis):
 * when it wakes, nothing of it is written back, in MySQL or in Redis.
 */
describe('agent runner: a delivery woken after its task completed (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-e', userId: 'erin' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, GatedWriter);
  });
  afterAll(() => agent?.stop());

  it('leaves no agent session behind, its failure record included', async () => {
    onWriteError = 'wrap'; // the refused write fails the handler: the runner records FAILED
    const task = await agent.seed(owner, [], 'question');
    let open!: () => void;
    gate = new Promise((r) => (open = r));
    const running = new Promise<void>((r) => (started = r));
    const req = agent.request(owner, task);
    const { agentSessionId } = agent.signer.verify(req.assignment, DESCRIPTOR.agentType);
    const answer = agent.execute(req).then(
      () => null,
      (err: unknown) => err,
    );
    await running;

    // The task completes (another delivery's stored result) and its cleanup runs.
    await agent.tasks.save(owner, { ...task, status: TaskStatus.COMPLETED });
    expect(
      await agent.tasks.removeAgentSessions(owner, task.conversationId, [agentSessionId]),
    ).toBe(true);
    const written = new Promise<unknown>(
      (r) => (wrote = (id, err) => id === agentSessionId && r(err)),
    );
    open();
    expect(await written).toMatchObject({ code: 'SUPERSEDED' });
    expect(await answer).not.toBeNull();

    const raw = agent.infra.keys.value(task.conversationId, StateKeys.agent(agentSessionId));
    expect(await agent.infra.redis!.exists(raw)).toBe(0);
    expect(
      await agent.tasks.agentSession(owner, task.conversationId, agentSessionId, true),
    ).toBeNull();
    const durable = (agent.infra.store as TieredSessionStore).durable;
    expect(
      await durable.get(owner, task.conversationId, StateKeys.agent(agentSessionId)),
    ).toBeNull();
  });
});
