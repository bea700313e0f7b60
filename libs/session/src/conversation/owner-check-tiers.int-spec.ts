import Redis from 'ioredis';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { DEFAULT_TTL, ttlRules } from '../config/session-options';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { newId } from '../ids';
import { TaskSession, TaskStatus } from '../model/task.model';
import { openSessionDataSource } from '../store/mysql/data-source';
import { MysqlSessionStore } from '../store/mysql/mysql-session.store';
import { RedisSessionStore } from '../store/redis/redis-session.store';
import { TieredSessionStore } from '../store/tiered/tiered-session.store';
import { ConversationRepository } from './conversation.repository';
import { Owner } from './owner';
import { TaskRepository } from './task.repository';

const tenantId = newId('t');
const alice: Owner = { tenantId, userId: 'alice' };
const eve: Owner = { tenantId, userId: 'eve' };
const mallory: Owner = { tenantId: newId('t'), userId: 'mallory' };

/**
 * Another user's or tenant's conversation or task answers as a missing one, and must cost what a
 * missing one costs: a read of a missing id goes past the LRU and Redis to MySQL, where the owner
 * check of one hot in Redis (or in the process's LRU) used to refuse it without MySQL, so how fast
 * the 404 came told whether the id existed. Counted here by the tiers each read asks, not timed.
 */
describe('a read refused for its owner asks the tiers a missing id asks', () => {
  const cleanups: Array<() => Promise<void>> = [];
  /** A process of its own: its LRU (trusted a minute here), its MySQL pool, its Redis client. */
  const openProcess = async (url: string, prefix: string) => {
    const durable = new MysqlSessionStore(await openSessionDataSource({ url }));
    const hot = new RedisSessionStore(new Redis(TEST_REDIS_URL), prefix, { authoritative: false });
    const store = new TieredSessionStore(durable, hot, {
      ttlFor: ttlRules(DEFAULT_TTL),
      lruTtlMs: 60_000,
    });
    cleanups.push(() => store.close());
    return {
      store,
      conversations: new ConversationRepository(store, { idleExpiryDays: 30 }),
      tasks: new TaskRepository(store),
    };
  };
  let writer: Awaited<ReturnType<typeof openProcess>>;
  let reader: Awaited<ReturnType<typeof openProcess>>;

  beforeAll(async () => {
    const db = await createTestDatabase('loom_owner_tiers');
    const prefix = createTestPrefix('loomownertiers');
    cleanups.push(() => Promise.all([db.drop(), prefix.cleanup()]).then(() => undefined));
    writer = await openProcess(db.url, prefix.prefix);
    reader = await openProcess(db.url, prefix.prefix);
  });
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  /**
   * The MySQL reads and Redis calls (probes; refills and absent markers after a miss) `read`
   * makes in the reading process, and how it ends.
   */
  async function tiersOf(read: () => Promise<unknown>) {
    const spies = {
      mysql: jest.spyOn(reader.store.durable, 'get'),
      redis: jest.spyOn(reader.store.hot, 'probeForRefill'),
      fill: jest.spyOn(reader.store.hot, 'fill'),
      markAbsent: jest.spyOn(reader.store.hot, 'markAbsent'),
    };
    try {
      const outcome = await read().then(
        (value) => (value === null ? 'null' : 'found'),
        (err: unknown) => (LoomError.is(err, LoomErrorCode.NOT_FOUND) ? 'NOT_FOUND' : err),
      );
      const { mysql, redis, fill, markAbsent } = spies;
      return {
        outcome,
        mysql: mysql.mock.calls.length,
        redis: redis.mock.calls.length,
        afterMiss: fill.mock.calls.length + markAbsent.mock.calls.length,
      };
    } finally {
      Object.values(spies).forEach((spy) => spy.mockRestore());
    }
  }

  const task = (conversationId: string): TaskSession => ({
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
  });

  it("asks MySQL for another user's or tenant's conversation as for a missing one", async () => {
    // alice's conversation, written by another process: hot in Redis, not in the reader's LRU
    const { conversationId } = (await writer.conversations.create(alice)).meta;
    const missing = await tiersOf(() => reader.conversations.get(eve, newId('c')));
    expect(missing).toEqual({ outcome: 'NOT_FOUND', mysql: 1, redis: 1, afterMiss: 1 });
    expect(await tiersOf(() => reader.conversations.get(eve, conversationId))).toEqual(missing);
    expect(await tiersOf(() => reader.conversations.get(mallory, conversationId))).toEqual(missing);
    // alice's own read of it costs what it did: Redis answers, MySQL is not asked
    expect(await tiersOf(() => reader.conversations.get(alice, conversationId))).toEqual({
      outcome: 'found',
      mysql: 0,
      redis: 1,
      afterMiss: 0,
    });
    // now in the reader's LRU too (alice's read put it there): another user still costs a miss
    expect(await tiersOf(() => reader.conversations.get(eve, conversationId))).toEqual(missing);
    expect(await tiersOf(() => reader.conversations.find(eve, conversationId))).toEqual({
      ...missing,
      outcome: 'null',
    });
    expect(await tiersOf(() => reader.conversations.get(alice, conversationId))).toEqual({
      outcome: 'found',
      mysql: 0,
      redis: 0,
      afterMiss: 0,
    });
  });

  it("asks MySQL for another user's or tenant's task as for a missing one", async () => {
    const { conversationId } = (await writer.conversations.create(alice)).meta;
    const { taskId } = task(conversationId);
    await writer.tasks.create(alice, { ...task(conversationId), taskId });
    const missing = await tiersOf(() => reader.tasks.getById(eve, newId('t')));
    expect(missing).toEqual({ outcome: 'NOT_FOUND', mysql: 1, redis: 1, afterMiss: 1 });
    expect(await tiersOf(() => reader.tasks.getById(eve, taskId))).toEqual(missing);
    expect(await tiersOf(() => reader.tasks.getById(mallory, taskId))).toEqual(missing);
    // alice's own: its reference and the task, both from Redis
    expect(await tiersOf(() => reader.tasks.getById(alice, taskId))).toEqual({
      outcome: 'found',
      mysql: 0,
      redis: 2,
      afterMiss: 0,
    });
    expect(await tiersOf(() => reader.tasks.getById(eve, taskId))).toEqual(missing);
  });

  it("asks MySQL for a task by another user's conversation id, however often asked", async () => {
    // The first ask marks the conversation's (never written) task reference absent in Redis: a
    // later one must not be answered from that marker, sooner than a missing id is.
    const { conversationId } = (await writer.conversations.create(alice)).meta;
    const missing = await tiersOf(() => reader.tasks.getById(eve, newId('c')));
    for (let ask = 0; ask < 3; ask++)
      expect(await tiersOf(() => reader.tasks.getById(eve, conversationId))).toEqual(missing);
    // and a conversation by another user's task id
    const { taskId } = task(conversationId);
    await writer.tasks.create(alice, { ...task(conversationId), taskId });
    const noConversation = await tiersOf(() => reader.conversations.get(eve, newId('c')));
    for (let ask = 0; ask < 3; ask++)
      expect(await tiersOf(() => reader.conversations.get(eve, taskId))).toEqual(noConversation);
  });
});
