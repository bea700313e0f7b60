import { createTestSessionInfra } from '@loom/testing';
import { LoomErrorCode } from '../errors/session-error';
import { ExecutionClaims } from '../lock/execution-claim';
import { ConversationLock } from '../lock/conversation-lock';
import { LIVENESS_CONFIRM_MS, LIVENESS_TTL_MS } from '../lock/lock-holder-liveness';
import { StateKeys } from '../model/state-keys';
import { RedisTarget, openRedis } from '../redis/redis-client';
import { SessionInfra } from '../session.providers';
import { MemorySessionStore } from '../store/memory/memory-session.store';
import { MysqlSessionStore } from '../store/mysql/mysql-session.store';
import { TieredSessionStore } from '../store/tiered/tiered-session.store';
import { ConversationRepository } from './conversation.repository';
import { SYSTEM_TENANT, SystemRepository, SystemSessions } from './system.repository';
import { TaskRepository } from './task.repository';

/** Where a run of the suite finds Redis: standalone, or a cluster of its own. */
export interface RecoveryBackend {
  name: 'standalone' | 'cluster';
  /** Starts what it needs: the Redis target, and a stop for afterAll. */
  open(): Promise<{ target: RedisTarget; close: () => Promise<void> }>;
}

/**
 * What recovery and the sweeper rely on, against real MySQL and Redis. On a cluster the
 * conversation lock, its holders' liveness keys (another slot than the lock's) and execution
 * claims; the run index and the sweeper, MySQL's part, and the 11 s wait for a killed holder
 * (the same keys as the two-looks case), run standalone only.
 */
export function runRecoverySupportSuite(backend: RecoveryBackend): void {
  const standalone = backend.name === 'standalone';
  /** A test declared on standalone Redis only. */
  const itStandalone: jest.It = standalone ? it : ((() => undefined) as unknown as jest.It);
  describe(`recovery support (MySQL + Redis, ${backend.name})`, () => {
    let infra: SessionInfra;
    let cleanup: () => Promise<void>;
    let conversations: ConversationRepository;
    let system: SystemRepository;
    let lock: ConversationLock;
    let target: RedisTarget;
    let closeBackend: () => Promise<void>;
    const alice = { tenantId: 't-rec', userId: 'alice' };

    beforeAll(async () => {
      ({ target, close: closeBackend } = await backend.open());
      ({ infra, cleanup } = await createTestSessionInfra('loom_test', target));
      conversations = new ConversationRepository(infra.store, { idleExpiryDays: 30 });
      system = new SystemRepository(infra.store);
      lock = new ConversationLock(infra.redis, infra.keys, infra.store, {
        ttlMs: 30_000,
        waitMs: 200,
      });
    });
    afterAll(async () => {
      await cleanup();
      await closeBackend();
    });

    const message = (role: 'user' | 'assistant', taskId: string) => ({
      role,
      content: `${role} of ${taskId}`,
      agentType: null,
      taskId,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });

    itStandalone(
      'an Idempotency-Key retry finds the first attempt although Redis cached "absent" for it',
      async () => {
        const tasks = new TaskRepository(infra.store);
        const { meta } = await conversations.create(alice);
        const id = meta.conversationId;
        // The first attempt's lookup: nothing yet, and Redis now remembers that.
        expect(await tasks.idempotentTask(alice, id, 'k'.repeat(40))).toBeNull();
        // It committed the key to MySQL; its Redis write failed (or it died before it).
        const tiered = infra.store as TieredSessionStore;
        await tiered.durable.save(
          { tenantId: alice.tenantId },
          id,
          StateKeys.idempotency('k'.repeat(40)),
          { taskId: 't_firstattempt01' },
        );
        expect(await tasks.idempotentTask(alice, id, 'k'.repeat(40))).toMatchObject({
          taskId: 't_firstattempt01',
        });
      },
    );

    itStandalone(
      'counts the messages MySQL holds when asked for a consistent count, though Redis lags',
      async () => {
        const { meta } = await conversations.create(alice);
        const id = meta.conversationId;
        await conversations.appendMessage(alice, id, message('user', 't_counted0000001'));
        await conversations.messages(alice, id); // Redis now holds the list, marked whole
        // A process that committed a message to MySQL and died before its Redis write.
        const tiered = infra.store as TieredSessionStore;
        const scope = { tenantId: alice.tenantId };
        await tiered.durable.append(
          scope,
          id,
          StateKeys.messages,
          message('user', 't_orphan00000001'),
        );
        expect(await conversations.messageCount(alice, id)).toBe(1);
        expect(await conversations.messageCount(alice, id, true)).toBe(2);
        // And an append at a seq recorded beforehand takes exactly that seq, or none.
        const at3 = await conversations.appendMessage(
          alice,
          id,
          message('user', 't_at3'),
          undefined,
          3,
        );
        expect(at3.seq).toBe(3);
        await expect(
          conversations.appendMessage(alice, id, message('user', 't_at3again'), undefined, 3),
        ).rejects.toMatchObject({ code: LoomErrorCode.CONFLICT });
      },
    );

    itStandalone(
      "never adopts a task's id as a conversation id, in its tenant or another",
      async () => {
        const victimTask = 't_victimtask00000001';
        await infra.store.save({ tenantId: alice.tenantId }, victimTask, StateKeys.taskRef, {
          conversationId: 'c_victim000000001',
          userId: alice.userId,
        });
        for (const caller of [
          { tenantId: alice.tenantId, userId: 'bob' },
          { tenantId: 't-other', userId: 'carol' },
        ]) {
          const { meta, created } = await conversations.create(caller, victimTask);
          expect(created).toBe(true);
          expect(meta.conversationId).not.toBe(victimTask);
        }
        expect(
          await infra.store.get({ tenantId: alice.tenantId }, victimTask, StateKeys.taskRef),
        ).toEqual({
          conversationId: 'c_victim000000001',
          userId: alice.userId,
        });
        expect(await infra.store.listSessionKeys({ tenantId: alice.tenantId }, victimTask)).toEqual(
          [StateKeys.taskRef],
        );
      },
    );

    itStandalone(
      'keeps the run index as one row per task, listed without scanning keys',
      async () => {
        const entry = (taskId: string) => ({
          taskId,
          tenantId: alice.tenantId,
          userId: alice.userId,
          conversationId: 'c_conversation01',
          owner: 'orchestrator-x',
          lockToken: 'a'.repeat(32),
          createdAt: new Date().toISOString(),
        });
        await system.saveRun(entry('t_task00000001'));
        await system.saveRun(entry('t_task00000002'));
        await system.removeRun('t_task00000001');
        expect((await system.runs(100)).map((e) => e.taskId)).toEqual(['t_task00000002']);
        expect(await system.run('t_task00000002')).toMatchObject({ owner: 'orchestrator-x' });
      },
    );

    itStandalone(
      "removes a run entry with a fence only while no newer owner's fence is on it",
      async () => {
        const entry = (taskId: string, fence?: number) => ({
          taskId,
          tenantId: alice.tenantId,
          userId: alice.userId,
          conversationId: 'c_conversation02',
          owner: 'orchestrator-y',
          lockToken: 'b'.repeat(32),
          ...(fence === undefined ? {} : { fence }),
          createdAt: new Date().toISOString(),
        });
        // MySQL (the distributed profile's run store) and the embedded profile's memory store.
        const memory = new SystemRepository(new MemorySessionStore());
        for (const repo of [system, memory]) {
          await repo.saveRun(entry('t_fenced00000001', 7));
          await repo.removeRun('t_fenced00000001', 6); // a late owner before it: left alone
          expect(await repo.run('t_fenced00000001')).toMatchObject({ fence: 7 });
          await repo.removeRun('t_fenced00000001', 7); // its own owner
          expect(await repo.run('t_fenced00000001')).toBeNull();
          await repo.saveRun(entry('t_fenced00000002', 7));
          await repo.removeRun('t_fenced00000002', 9); // a recoverer after it
          expect(await repo.run('t_fenced00000002')).toBeNull();
          await repo.saveRun(entry('t_fenced00000003')); // written before fences were recorded
          await repo.removeRun('t_fenced00000003', 1);
          expect(await repo.run('t_fenced00000003')).toBeNull();
        }
      },
    );

    itStandalone(
      'reads a run index longer than the connection queue, and leaves the pool to turns',
      async () => {
        // A busy deployment (or one recovering from an outage) indexes more tasks than the pool's
        // queue holds (1000): the scan must not fail, nor crowd out the statements of turns.
        const n = 1_200;
        const rows = Array.from({ length: n }, (_, i) => {
          const taskId = `t_bulk${String(i).padStart(8, '0')}`;
          const entry = {
            taskId,
            tenantId: alice.tenantId,
            userId: alice.userId,
            conversationId: 'c_conversation02',
            owner: 'orchestrator-y',
            lockToken: null,
            createdAt: new Date().toISOString(),
          };
          return [SystemSessions.runs, `run:${taskId}`, 0, SYSTEM_TENANT, JSON.stringify(entry)];
        });
        await infra.dataSource!.query(
          'INSERT INTO loom_session_state (session_id, state_key, item_index, tenant_id, state_data) VALUES ?',
          [rows],
        );
        const { meta } = await conversations.create(alice);
        const [entries, during] = await Promise.all([
          system.runs(10_000),
          conversations.get(alice, meta.conversationId, true),
        ]);
        expect(entries.filter((e) => e.owner === 'orchestrator-y')).toHaveLength(n);
        expect(during.conversationId).toBe(meta.conversationId);
        await infra.dataSource!.query(
          "DELETE FROM loom_session_state WHERE session_id = ? AND state_key LIKE 'run:t\\_bulk%'",
          [SystemSessions.runs],
        );
      },
    );

    itStandalone('never adopts a system session id as a conversation id', async () => {
      const { meta, created } = await conversations.create(alice, SystemSessions.runs);
      expect(created).toBe(true);
      expect(meta.conversationId).not.toBe(SystemSessions.runs);
    });

    itStandalone('finds a reply MySQL holds even when the hot copy missed it', async () => {
      const { meta } = await conversations.create(alice);
      const id = meta.conversationId;
      await conversations.appendMessage(alice, id, message('user', 't_task00000010'));
      expect(await conversations.findReply(alice, id, 't_task00000010', 0)).toBeNull();
      // A process killed between its MySQL commit and its Redis write: MySQL only.
      const durable = (infra.store as TieredSessionStore).durable;
      await durable.append(alice, id, StateKeys.messages, message('assistant', 't_task00000010'));
      expect(await conversations.findReply(alice, id, 't_task00000010', 0)).toBeNull();
      await conversations.refresh(id);
      expect(await conversations.findReply(alice, id, 't_task00000010', 0)).toMatchObject({
        seq: 2,
        role: 'assistant',
      });
    });

    it('takes over a lock only from the stale holder named, and fences that holder out', async () => {
      const { meta } = await conversations.create(alice);
      const id = meta.conversationId;
      const dead = await lock.acquire(alice, id);
      expect(await lock.takeOver(alice, id, 'f'.repeat(32))).toBeNull();
      const next = await lock.takeOver(alice, id, dead.token);
      expect(next).not.toBeNull();
      expect(next!.fence).toBeGreaterThan(dead.fence);
      await expect(conversations.save(alice, meta, dead.fence)).rejects.toMatchObject({
        code: LoomErrorCode.STALE_FENCING_TOKEN,
      });
      await conversations.save(alice, meta, next!.fence);
      await expect(lock.acquire(alice, id, 50)).rejects.toMatchObject({
        code: LoomErrorCode.LOCK_TIMEOUT,
      });
      await next!.release();
      const free = await lock.takeOver(alice, id, null);
      expect(free).not.toBeNull();
      await free!.release();
    });

    it('takes a lock over from a holder found stale while waiting, and from no other', async () => {
      const { meta } = await conversations.create(alice);
      const id = meta.conversationId;
      const waiting = new ConversationLock(infra.redis, infra.keys, infra.store, {
        ttlMs: 30_000,
        waitMs: 400,
      });
      const dead = await waiting.acquire(alice, id);
      const asked: string[] = [];
      const live = async (token: string) => (asked.push(token), false);
      // Looked at again and again while it waits: a second's wait for two looks 100 ms apart, as
      // stalls on a loaded machine (the whole suite beside this on two cores) delay the looks.
      await expect(
        waiting.acquire(alice, id, 1_000, { staleHolder: live, staleCheckMs: 100 }),
      ).rejects.toMatchObject({ code: LoomErrorCode.LOCK_TIMEOUT });
      expect(asked.length).toBeGreaterThan(1);
      expect(new Set(asked)).toEqual(new Set([dead.token]));
      // A check that fails is a "not stale": the waiter goes on waiting, and times out.
      const failing = async () => Promise.reject(new Error('database away'));
      await expect(
        waiting.acquire(alice, id, undefined, { staleHolder: failing, staleCheckMs: 100 }),
      ).rejects.toMatchObject({ code: LoomErrorCode.LOCK_TIMEOUT });
      const stale = async (token: string) => token === dead.token;
      const next = await waiting.acquire(alice, id, undefined, { staleHolder: stale });
      expect(next.takenOverFrom).toBe(dead.token);
      expect(next.fence).toBeGreaterThan(dead.fence);
      expect(await infra.redis!.get(infra.keys.lock(id))).toBe(next.token);
      await expect(conversations.save(alice, meta, dead.fence)).rejects.toMatchObject({
        code: LoomErrorCode.STALE_FENCING_TOKEN,
      });
      await dead.release(); // token-checked: the successor keeps the lock
      expect(await infra.redis!.get(infra.keys.lock(id))).toBe(next.token);
      await next.release();
      const free = await waiting.acquire(alice, id, undefined, { staleHolder: stale });
      expect(free.takenOverFrom).toBeUndefined();
      await free.release();
    });

    itStandalone(
      "takes a lock over once its holder's process is gone, whatever it was doing, not while it lives",
      async () => {
        const { meta } = await conversations.create(alice);
        const id = meta.conversationId;
        // The holder: another process, as Redis sees it (a connection of its own).
        const holderRedis = openRedis(target, { maxRetriesPerRequest: 1 });
        const holder = new ConversationLock(holderRedis, infra.keys, infra.store, {
          ttlMs: 30_000,
          waitMs: 200,
        });
        const held = await holder.acquire(alice, id);
        expect(held.token).toMatch(/^[A-Za-z0-9_-]{12}\.[0-9a-f]{32}$/);
        const waiter = new ConversationLock(infra.redis, infra.keys, infra.store, {
          ttlMs: 30_000,
          waitMs: LIVENESS_TTL_MS + LIVENESS_CONFIRM_MS + 1500,
        });
        // No task names it (a turn still planning, or summarizing after its task): a holder whose
        // process lives is waited for all the same, longer than its liveness key would last.
        await expect(waiter.acquire(alice, id)).rejects.toMatchObject({
          code: LoomErrorCode.LOCK_TIMEOUT,
        });
        // Killed: nothing rewrites its liveness key or renews its lock, which would last 30 s.
        holderRedis.disconnect();
        const next = await waiter.acquire(alice, id, 15_000);
        expect(next).toMatchObject({ takenOverFrom: held.token, holderGone: true });
        expect(next.fence).toBeGreaterThan(held.fence);
        expect(await infra.redis!.get(infra.keys.lock(id))).toBe(next.token);
        await expect(conversations.save(alice, meta, held.fence)).rejects.toMatchObject({
          code: LoomErrorCode.STALE_FENCING_TOKEN,
        });
        await next.release();
      },
    );

    it('takes a holder for gone only when two looks LIVENESS_CONFIRM_MS apart find its key absent, however slow the lease check between', async () => {
      const { meta } = await conversations.create(alice);
      const id = meta.conversationId;
      // A holder process, as Redis sees it: its lock value names it, and its liveness key has
      // lapsed (it missed its beats: stalled under load, or its Redis writes timed out).
      const holderId = 'h0lderProc01';
      const holderKey = infra.keys.lockHolder(holderId);
      await infra.redis!.set(infra.keys.lock(id), `${holderId}.${'0'.repeat(32)}`, 'PX', 30_000);
      await infra.redis!.del(holderKey);
      const waiter = new ConversationLock(infra.redis, infra.keys, infra.store, {
        ttlMs: 30_000,
        waitMs: LIVENESS_CONFIRM_MS + 1500,
      });
      // The lease rule's check (MySQL, under load) takes longer than LIVENESS_CONFIRM_MS, and
      // meanwhile the holder beats again: it is alive, and is waited for.
      const staleHolder = async () => {
        await infra.redis!.set(holderKey, '1', 'PX', 30_000);
        await new Promise((r) => setTimeout(r, LIVENESS_CONFIRM_MS + 100));
        return false;
      };
      await expect(waiter.acquire(alice, id, undefined, { staleHolder })).rejects.toMatchObject({
        code: LoomErrorCode.LOCK_TIMEOUT,
      });
      expect(await infra.redis!.get(infra.keys.lock(id))).toBe(`${holderId}.${'0'.repeat(32)}`);
      await infra.redis!.del(infra.keys.lock(id)); // apart: two slots on a cluster
      await infra.redis!.del(holderKey);
    });

    it('keeps a lock for as long as its holder works, and lets it lapse once taken over', async () => {
      const { meta } = await conversations.create(alice);
      const id = meta.conversationId;
      // A TTL long enough that a loaded machine's stalls (the whole suite runs beside this on two
      // cores) never leave a renewal, due every third of it, late by the whole TTL.
      const short = new ConversationLock(infra.redis, infra.keys, infra.store, {
        ttlMs: 1_500,
        waitMs: 50,
      });
      const key = infra.keys.lock(id);
      const held = await short.acquire(alice, id);
      await new Promise((r) => setTimeout(r, 4_600)); // a slow step: three TTLs and more
      expect(await infra.redis!.get(key)).toBe(held.token);
      await expect(short.acquire(alice, id)).rejects.toMatchObject({
        code: LoomErrorCode.LOCK_TIMEOUT,
      });
      // Recovery took it over (as from a holder it found dead): the former holder's renewals
      // stop at the first that finds another token, so they never extend the successor's lock.
      const next = (await short.takeOver(alice, id, held.token))!;
      await next.release();
      expect(await infra.redis!.get(key)).toBeNull();
      await new Promise((r) => setTimeout(r, 700)); // longer than a renewal's period
      expect(await infra.redis!.get(key)).toBeNull();
      await held.release(); // token-checked: a no-op now
      const again = await short.acquire(alice, id);
      await again.release();
      expect(await infra.redis!.get(key)).toBeNull();
    });

    it('lets one delivery of an execution run at a time', async () => {
      const claims = new ExecutionClaims(infra.redis, infra.keys, { ttlMs: 2000, pollMs: 20 });
      const first = await claims.acquire('c_conversation01', 'a_execution0001', Date.now() + 5000);
      const order: string[] = [];
      const second = claims
        .acquire('c_conversation01', 'a_execution0001', Date.now() + 5000)
        .then((c) => (order.push('second'), c));
      await new Promise((r) => setTimeout(r, 100));
      order.push('first done');
      await first.release();
      await (await second).release();
      expect(order).toEqual(['first done', 'second']);
      const held = await claims.acquire('c_conversation01', 'a_execution0002', Date.now() + 5000);
      await expect(
        claims.acquire('c_conversation01', 'a_execution0002', Date.now() + 100),
      ).rejects.toMatchObject({ code: LoomErrorCode.TIMEOUT });
      await held.release();
    });

    it('confirms a claim before a write: extended while held, taken again if it lapsed, refused once another delivery holds it', async () => {
      const claims = new ExecutionClaims(infra.redis, infra.keys, { ttlMs: 2000, pollMs: 20 });
      const key = `${infra.keys.session('c_conversation01')}:claim:a_execution0003`;
      const redis = infra.redis!;
      const claim = await claims.acquire('c_conversation01', 'a_execution0003', Date.now() + 5000);
      await redis.pexpire(key, 100);
      await claim.confirm();
      expect(await redis.pttl(key)).toBeGreaterThan(1000); // extended to a whole TTL
      await redis.del(key); // lapsed (a Redis pause), nobody took it
      await claim.confirm();
      expect(await redis.pttl(key)).toBeGreaterThan(1000);
      await redis.set(key, 'another-delivery', 'PX', 2000);
      await expect(claim.confirm()).rejects.toMatchObject({ code: LoomErrorCode.SUPERSEDED });
      await claim.release();
      expect(await redis.get(key)).toBe('another-delivery'); // not ours to release
      await redis.del(key);

      // Lapsed, then taken and let go by another delivery: its result stands, so no take-back.
      const other = new ExecutionClaims(infra.redis, infra.keys, { ttlMs: 2000, pollMs: 20 });
      const lapsing = await claims.acquire(
        'c_conversation01',
        'a_execution0005',
        Date.now() + 5000,
      );
      await redis.del(`${infra.keys.session('c_conversation01')}:claim:a_execution0005`);
      await (
        await other.acquire('c_conversation01', 'a_execution0005', Date.now() + 5000)
      ).release();
      await expect(lapsing.confirm()).rejects.toMatchObject({ code: LoomErrorCode.SUPERSEDED });
      await lapsing.release();
      // Nothing is written for an execution once its delivery let go of the claim.
      const ended = await claims.acquire('c_conversation01', 'a_execution0006', Date.now() + 5000);
      await ended.release();
      await expect(ended.confirm()).rejects.toMatchObject({ code: LoomErrorCode.SUPERSEDED });

      // A deadline with a fraction of a millisecond (it is the assignment's, signed elsewhere).
      const fractional = await claims.acquire(
        'c_conversation01',
        'a_execution0007',
        Date.now() + 5000.5,
      );
      await fractional.confirm();
      await fractional.release();

      const local = new ExecutionClaims(null, infra.keys, { ttlMs: 2000, pollMs: 20 });
      const first = await local.acquire('c_conversation01', 'a_execution0004', Date.now() + 5000);
      await first.confirm();
      await first.release();
      const second = await local.acquire('c_conversation01', 'a_execution0004', Date.now() + 5000);
      await expect(first.confirm()).rejects.toMatchObject({ code: LoomErrorCode.SUPERSEDED });
      await second.release();
    });

    itStandalone(
      'a task a stale holder fails to create leaves no task reference behind',
      async () => {
        const tasks = new TaskRepository(infra.store);
        const { meta } = await conversations.create(alice);
        const id = meta.conversationId;
        // A turn paused past its lock; meanwhile the conversation was taken over (or deleted).
        const paused = await lock.acquire(alice, id);
        const next = await lock.takeOver(alice, id, paused.token);
        await next!.release();
        const taskId = 't_stalecreate01';
        const task = { taskId, conversationId: id, tenantId: alice.tenantId, userId: alice.userId };
        await expect(tasks.create(alice, task as never, paused.fence)).rejects.toMatchObject({
          code: LoomErrorCode.STALE_FENCING_TOKEN,
        });
        // Nothing lists the task, so nothing (purge, sweeper) would ever remove its reference.
        expect(await infra.store.exists(alice, taskId)).toBe(false);
      },
    );

    it('a holder paused across a DELETE stays fenced out once the id is locked again', async () => {
      const { meta } = await conversations.create(alice);
      const id = meta.conversationId;
      const paused = await lock.acquire(alice, id); // the conversation's first turn, paused
      const deleting = await lock.takeOver(alice, id, paused.token); // DELETE takes the lock over
      await conversations.delete(alice, id);
      await deleting!.release();
      // A turn that waited for the lock of the deleted conversation (it answers 404), or the id
      // created again by its owner: the id is locked again.
      const again = await lock.acquire(alice, id);
      await again.release();
      expect(again.fence).toBeGreaterThan(deleting!.fence);
      await expect(conversations.save(alice, meta, paused.fence)).rejects.toMatchObject({
        code: LoomErrorCode.STALE_FENCING_TOKEN,
      });
      expect(await conversations.metaOf(alice.tenantId, id)).toBeNull();
    });

    itStandalone(
      'sweeps idle conversations whole and other expired rows, never a conversation row alone',
      async () => {
        const durable = (infra.store as TieredSessionStore).durable as MysqlSessionStore;
        const { meta } = await conversations.create(alice);
        const id = meta.conversationId;
        await conversations.appendMessage(alice, id, message('user', 't_task00000020'));
        const past = new Date(Date.now() - 1000);
        await infra.store.save(alice, id, StateKeys.conversation, meta, { expiresAt: past });
        await infra.store.save(
          alice,
          id,
          StateKeys.agent('a_orphan00000001'),
          {},
          { expiresAt: past },
        );
        const now = new Date();
        expect(await durable.sweepExpired(now, 100, { exceptKeys: [StateKeys.conversation] })).toBe(
          1,
        );
        expect(await durable.expiredSessions(StateKeys.conversation, now, 10)).toEqual([
          { sessionId: id, tenantId: alice.tenantId },
        ]);
        await conversations.purge(alice.tenantId, id);
        expect(await infra.store.exists(alice, id)).toBe(false);
        expect(await durable.expiredSessions(StateKeys.conversation, now, 10)).toEqual([]);
      },
    );
  });
}
