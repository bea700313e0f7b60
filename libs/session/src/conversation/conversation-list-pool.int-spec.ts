import { createTestDatabase } from '@loom/testing';
import { newId } from '../ids';
import { openSessionDataSource } from '../store/mysql/data-source';
import { MysqlSessionStore } from '../store/mysql/mysql-session.store';
import { ConversationRepository } from './conversation.repository';

/**
 * A page of conversations is read back one conversation each. It used to read the whole page
 * (up to 100) at once against a pool of 10 connections whose queue holds 1,000: a few users
 * listing at once queued every other tenant's turn behind their reads, and eleven listings
 * passed the queue limit, failing everyone's statements (503) until they drained.
 */
describe('ConversationRepository.list against a small MySQL pool', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let store: MysqlSessionStore;
  let repo: ConversationRepository;
  const owner = { tenantId: newId('t'), userId: newId('a') };

  beforeAll(async () => {
    db = await createTestDatabase('loom_listpool');
    store = new MysqlSessionStore(await openSessionDataSource({ url: db.url, poolSize: 1 }));
    repo = new ConversationRepository(store, { idleExpiryDays: 30 });
    for (let i = 0; i < 100; i++) await repo.create(owner);
  });
  afterAll(async () => {
    await store?.close();
    await db?.drop();
  });

  it('reads a few conversations at a time, not a whole page at once', async () => {
    let reading = 0;
    let mostAtOnce = 0;
    const get = store.get.bind(store);
    const spy = jest.spyOn(store, 'get').mockImplementation(async (...args) => {
      mostAtOnce = Math.max(mostAtOnce, ++reading);
      try {
        return await get(...args);
      } finally {
        reading--;
      }
    });
    try {
      const { items } = await repo.list(owner, { limit: 100 });
      expect(items).toHaveLength(100);
    } finally {
      spy.mockRestore();
    }
    expect(mostAtOnce).toBeLessThanOrEqual(8);
  });

  it("eleven listings at once stay within the pool's queue limit", async () => {
    const pages = await Promise.allSettled(
      Array.from({ length: 11 }, () => repo.list(owner, { limit: 100 })),
    );
    expect(pages.map((p) => (p.status === 'fulfilled' ? p.value.items.length : p.reason))).toEqual(
      Array(11).fill(100),
    );
  });
});
