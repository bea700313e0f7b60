import request from 'supertest';
import { ConversationRepository, SESSION_INFRA, SessionInfra } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** Paging through GET /v1/conversations while the user deletes one (in-process, real stores). */
describe('listing conversations (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('list');
  });
  afterAll(() => orch?.close());

  it('a conversation deleted while a page is read leaves that page short, not the listing cut off', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const auth = orch.auth('alice', 'acme');
    const conversations = orch.get(ConversationRepository);
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      ids.push((await conversations.create(owner)).meta.conversationId);
      await new Promise((r) => setTimeout(r, 5)); // distinct update times: newest first
    }
    const newestFirst = [...ids].reverse();
    // The user deletes the second newest (in another tab) after the page's rows were listed.
    const store = orch.get<SessionInfra>(SESSION_INFRA).store;
    const listed = store.listSessions.bind(store);
    const spy = jest.spyOn(store, 'listSessions').mockImplementationOnce(async (...args) => {
      const rows = await listed(...args);
      await conversations.delete(owner, newestFirst[1]);
      return rows;
    });
    const first = await request(orch.app.getHttpServer())
      .get('/v1/conversations?limit=2')
      .set('authorization', auth);
    spy.mockRestore();
    expect(first.status).toBe(200);
    expect(first.body.items.map((c: { conversationId: string }) => c.conversationId)).toEqual([
      newestFirst[0],
    ]);
    expect(first.body.nextCursor).not.toBeNull();
    const second = await request(orch.app.getHttpServer())
      .get(`/v1/conversations?limit=2&cursor=${first.body.nextCursor}`)
      .set('authorization', auth);
    expect(second.status).toBe(200);
    expect(second.body.items.map((c: { conversationId: string }) => c.conversationId)).toEqual(
      newestFirst.slice(2),
    );
    expect(second.body.nextCursor).not.toBeNull();
    const third = await request(orch.app.getHttpServer())
      .get(`/v1/conversations?limit=2&cursor=${second.body.nextCursor}`)
      .set('authorization', auth);
    expect(third.body).toEqual({ items: [], nextCursor: null });
  });
});
