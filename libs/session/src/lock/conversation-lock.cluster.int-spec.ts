import { createTestSessionInfra, PrivateRedisCluster } from '@loom/testing';
import { ConversationRepository } from '../conversation/conversation.repository';
import { LoomErrorCode } from '../errors/session-error';
import { SessionInfra } from '../session.providers';
import { ConversationLock } from './conversation-lock';

/**
 * The conversation lock on a Redis Cluster of this file's own, where a lock and its holder's
 * liveness key (`lockholder:<holderId>`, no hash tag) sit in different slots, often on different
 * masters: one of them can be out of reach while the other answers.
 */
describe('ConversationLock on a Redis Cluster', () => {
  let cluster: PrivateRedisCluster;
  let infra: SessionInfra;
  let cleanup: () => Promise<void>;
  const alice = { tenantId: 't-lockc', userId: 'alice' };

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    ({ infra, cleanup } = await createTestSessionInfra('loom_test', {
      url: cluster.url,
      clusterNodes: cluster.seeds,
    }));
  });
  afterAll(async () => {
    await cleanup?.();
    await cluster?.stop();
  });

  it("keeps a waiter out while the lock's master answers, though the holder's liveness key is out of reach", async () => {
    const conversations = new ConversationRepository(infra.store, { idleExpiryDays: 30 });
    const opts = { ttlMs: 30_000, waitMs: 200 };
    const holder = new ConversationLock(infra.redis, infra.keys, infra.store, opts);
    const waiter = new ConversationLock(infra.redis, infra.keys, infra.store, opts);
    // A conversation whose lock sits on another master than the holder's liveness key.
    let id = '';
    let held: Awaited<ReturnType<ConversationLock['acquire']>> | undefined;
    let livenessPort = 0;
    for (let i = 0; i < 20 && !livenessPort; i++) {
      id = (await conversations.create(alice)).meta.conversationId;
      held = await holder.acquire({ tenantId: alice.tenantId }, id);
      const livenessKey = infra.keys.lockHolder(held.token.split('.')[0]);
      const [lockAt, livenessAt] = await Promise.all([
        cluster.portOf(infra.keys.lock(id)),
        cluster.portOf(livenessKey),
      ]);
      if (lockAt !== livenessAt) livenessPort = livenessAt;
      else await held.release();
    }
    expect(livenessPort).not.toBe(0);

    // The liveness key's master goes away; the lock's master, and the holder, are fine.
    await cluster.kill(livenessPort);
    // The holder holds on: the waiter waits, and gets the busy conversation's LOCK_TIMEOUT,
    // rather than taking the lock's failure for Redis's and running beside the holder.
    await expect(
      waiter.acquire({ tenantId: alice.tenantId }, id, 1500, { staleCheckMs: 200 }),
    ).rejects.toMatchObject({ code: LoomErrorCode.LOCK_TIMEOUT });
    expect(await infra.redis!.get(infra.keys.lock(id))).toBe(held!.token);
    // Nor does recovery take the holder for dead (and its lock over) on that account.
    expect(await waiter.heldAlive(id, held!.token)).toBe(true);
    await held!.release();
  });
});
