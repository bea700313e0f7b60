import { createTestSessionInfra } from '@loom/testing';
import {
  ConversationLock,
  ConversationRepository,
  SessionInfra,
  StateKeys,
  SYSTEM_TENANT,
  SystemSessions,
  TaskRepository,
  TieredSessionStore,
} from '@loom/session';
import { SessionSweeper } from '../apps/orchestrator/src/recovery/session-sweeper.service';
import { createConnection } from 'mysql2/promise';
import { storedMessages } from './faults.support';

/**
 * The sweeper against real MySQL and Redis: idle conversations go whole (messages, tasks and
 * their task-ref sessions included), a conversation touched again or busy stays, expired rows of
 * other keys go, and only one replica sweeps at a time.
 */
describe('recovery: the sweeper', () => {
  let infra: SessionInfra;
  let cleanup: () => Promise<void>;
  let mysqlUrl: string;
  let conversations: ConversationRepository;
  let tasks: TaskRepository;
  let lock: ConversationLock;
  let sweeper: SessionSweeper;
  const bob = { tenantId: 't-sweep', userId: 'bob' };

  beforeAll(async () => {
    ({ infra, cleanup, mysqlUrl } = await createTestSessionInfra('loom_sweep'));
    conversations = new ConversationRepository(infra.store, { idleExpiryDays: 30 });
    tasks = new TaskRepository(infra.store);
    lock = new ConversationLock(infra.redis, infra.keys, infra.store, {
      ttlMs: 30_000,
      waitMs: 200,
    });
    sweeper = new SessionSweeper(infra, conversations, lock);
  });
  afterAll(() => cleanup());

  /** A conversation with a message and a task (its task-ref session too), idle since `ago`. */
  async function conversation(idleMs: number): Promise<{ id: string; taskId: string }> {
    const { meta } = await conversations.create(bob);
    const id = meta.conversationId;
    const taskId = `t_sweep${Math.random().toString(36).slice(2, 12)}`;
    await conversations.appendMessage(bob, id, {
      role: 'user',
      content: 'hello',
      agentType: null,
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });
    await tasks.create(bob, { taskId, conversationId: id, userId: bob.userId } as never);
    meta.expiresAt = new Date(Date.now() - idleMs).toISOString();
    await infra.store.save(bob, id, StateKeys.conversation, meta, {
      userId: bob.userId,
      expiresAt: new Date(meta.expiresAt),
    });
    return { id, taskId };
  }

  it('purges idle conversations whole, keeps live and busy ones, sweeps other expired rows', async () => {
    const idle = await conversation(60_000);
    const live = await conversation(-86_400_000);
    const busy = await conversation(60_000);
    const held = await lock.acquire(bob, busy.id);
    const { meta } = await conversations.create(bob);
    const past = new Date(Date.now() - 1000);
    await infra.store.save(
      bob,
      meta.conversationId,
      StateKeys.agent('a_orphaned000001'),
      {},
      {
        expiresAt: past,
      },
    );

    const first = await sweeper.sweep();
    const other = await lock.acquire({ tenantId: SYSTEM_TENANT }, SystemSessions.sweeper, 0);
    const concurrent = await sweeper.sweep();
    await other.release();
    await held.release();
    const afterBusy = await sweeper.sweep();
    const counts = {
      first,
      concurrent,
      afterBusy,
      idleMessages: (await storedMessages(mysqlUrl, idle.id)).length,
      liveMessages: (await storedMessages(mysqlUrl, live.id)).length,
      busyMessages: (await storedMessages(mysqlUrl, busy.id)).length,
    };
    console.log(`sweeper: ${JSON.stringify(counts)}`);

    expect(first).toEqual({ conversations: 1, rows: 1, fences: 0, skipped: false });
    expect(concurrent).toEqual({ conversations: 0, rows: 0, fences: 0, skipped: true });
    expect(afterBusy).toEqual({ conversations: 1, rows: 0, fences: 0, skipped: false });
    expect(counts).toMatchObject({ idleMessages: 0, liveMessages: 1, busyMessages: 0 });
    expect(await infra.store.exists(bob, idle.id)).toBe(false);
    expect(await infra.store.exists(bob, idle.taskId)).toBe(false); // its task-ref session
    expect(await conversations.find(bob, live.id)).not.toBeNull();
    expect(await infra.store.exists(bob, live.taskId)).toBe(true);
    // Gone from MySQL; a hot copy (if any) dies with its own, shorter TTL.
    const durable = (infra.store as TieredSessionStore).durable;
    expect(await durable.get(bob, meta.conversationId, StateKeys.agent('a_orphaned000001'))).toBe(
      null,
    );
  });

  /** The `_fence` rows MySQL holds for these sessions: session id → token. */
  async function fences(...ids: string[]): Promise<Record<string, number>> {
    const conn = await createConnection(mysqlUrl);
    try {
      const [rows] = await conn.query(
        'SELECT session_id, state_data FROM loom_session_state ' +
          "WHERE state_key = '_fence' AND session_id IN (?)",
        [ids],
      );
      const list = rows as Array<{ session_id: string; state_data: string }>;
      return Object.fromEntries(list.map((r) => [r.session_id, Number(r.state_data)]));
    } finally {
      await conn.end();
    }
  }

  it('removes a fence left alone under a deleted conversation once not issued for an hour, no other', async () => {
    // A turn that waited for the lock of a conversation deleted meanwhile takes it, and its fence
    // row is then all that is left under that id (it answers 404).
    const { meta: gone } = await conversations.create(bob);
    await conversations.delete(bob, gone.conversationId);
    await (await lock.acquire(bob, gone.conversationId)).release();
    const { meta: live } = await conversations.create(bob);
    await (await lock.acquire(bob, live.conversationId)).release();
    // The sweeper's own lock: a fence alone under a system id, which stays.
    const ids = [gone.conversationId, live.conversationId, SystemSessions.sweeper];

    const soon = await sweeper.sweep(new Date(Date.now() + 30 * 60_000));
    expect(Object.keys(await fences(...ids)).sort()).toEqual([...ids].sort());
    const later = await sweeper.sweep(new Date(Date.now() + 2 * 3_600_000));
    const left = await fences(...ids);
    expect(Object.keys(left).sort()).toEqual([live.conversationId, SystemSessions.sweeper].sort());
    expect(soon.fences).toBe(0);
    // This one, and the counters of the conversations purged above (a purge keeps its counter).
    expect(later.fences).toBeGreaterThanOrEqual(1);
    // A live conversation's fence goes on from where it was.
    const next = await lock.acquire(bob, live.conversationId);
    await next.release();
    expect(next.fence).toBe(left[live.conversationId] + 1);
  });

  /**
   * A run purged 200 idle conversations and removed 1,000 fences at most, every 10 min: 28,800
   * conversations a day. A deployment whose conversations go idle faster (or are deleted faster
   * than 144,000 a day, each leaving its fence) fell behind for good: MySQL grew without bound.
   * A run now goes on in bounded batches while they come back full, for up to a minute.
   */
  it('keeps purging while batches come back full: a backlog past one batch goes in one run', async () => {
    const many = [];
    for (let i = 0; i < 210; i++) many.push(await conversation(60_000));
    const run = await sweeper.sweep();
    const left = (await Promise.all(many.map(({ id }) => infra.store.exists(bob, id)))).filter(
      Boolean,
    ).length;
    console.log(`sweeper backlog: ${JSON.stringify({ run, left })}`);
    expect(left).toBe(0);
    expect(run.conversations).toBe(210);
  });
});
