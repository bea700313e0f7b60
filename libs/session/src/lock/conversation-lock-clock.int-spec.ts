import { createTestSessionInfra } from '@loom/testing';
import { SessionInfra } from '../session.providers';
import { ConversationLock } from './conversation-lock';

/** The lock's keep-alive against a wall clock that jumps (NTP step, VM resume), on real Redis. */
describe('conversation lock: wall-clock jumps (MySQL + Redis)', () => {
  let infra: SessionInfra;
  let cleanup: () => Promise<void>;
  const scope = { tenantId: 't-clock' };

  beforeAll(async () => {
    ({ infra, cleanup } = await createTestSessionInfra('loom_test_lockclock'));
  });
  afterAll(async () => {
    jest.restoreAllMocks();
    await cleanup();
  });

  it('keeps renewing itself when the wall clock steps forward by an hour', async () => {
    // Renewed every third of the TTL: a TTL a loaded machine's stalls (of the event loop or of
    // Redis, the whole suite running beside this on two cores) cannot outlast between renewals.
    const ttlMs = 1_500;
    const lock = new ConversationLock(infra.redis, infra.keys, infra.store, { ttlMs, waitMs: 200 });
    const handle = await lock.acquire(scope, 'c_clockjump0001');
    const realNow = Date.now;
    // The host's clock steps an hour forward right after the lock was taken.
    const jump = jest.spyOn(Date, 'now').mockImplementation(() => realNow() + 3_600_000);
    try {
      // Two TTLs later the holder is still working: its lock must still be there, renewed after
      // the jump (without a renewal it would have lapsed a whole TTL ago).
      await new Promise((r) => setTimeout(r, ttlMs * 2));
      expect(await infra.redis!.get(infra.keys.lock('c_clockjump0001'))).toBe(handle.token);
    } finally {
      jump.mockRestore();
      await handle.release();
    }
  });
});
