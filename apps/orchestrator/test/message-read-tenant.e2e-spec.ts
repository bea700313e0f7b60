import request from 'supertest';
import { MessageReadAdmission } from '../src/conversations/message-read-admission';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * LOOM_MAX_MESSAGES_READ_IN_FLIGHT bounds the messages the pages of GET …/messages hold at once,
 * whoever reads them: a few pages of 200 fill it. One tenant reading large pages at once must not
 * refuse every other tenant's reads with 503: a tenant's pages hold at most
 * LOOM_MAX_MESSAGES_READ_PER_TENANT messages, by default half of the bound (at least one page).
 */
describe("one tenant's message reads leave the other tenants their share", () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('read_tenants', {
      env: { LOOM_MAX_MESSAGES_READ_IN_FLIGHT: '400' },
    });
  });
  afterAll(() => orch?.close());

  const server = () => orch.app.getHttpServer();
  const conversationOf = async (auth: string): Promise<string> => {
    const created = await request(server())
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({});
    expect(created.status).toBe(201);
    return created.body.conversationId;
  };

  it("reads another tenant's page while one tenant holds as many pages as it may", async () => {
    const greedy = orch.auth('g', 'tenant-greedy-reader');
    const other = orch.auth('o', 'tenant-other-reader');
    const [greedyId, otherId] = [await conversationOf(greedy), await conversationOf(other)];
    const admission = orch.get(MessageReadAdmission);
    // the greedy tenant's pages of 200 being built, as many as it is let hold
    const held: Array<() => void> = [];
    try {
      for (let i = 0; i < 2; i++) {
        try {
          held.push(admission.admit(200, { tenantId: 'tenant-greedy-reader', userId: 'g' }));
        } catch {
          break;
        }
      }
      const theirs = await request(server())
        .get(`/v1/conversations/${otherId}/messages?limit=200`)
        .set('authorization', other);
      expect([theirs.status, theirs.body]).toEqual([200, { items: [] }]);
      // the greedy tenant's next page is refused at once, with when to retry
      const more = await request(server())
        .get(`/v1/conversations/${greedyId}/messages?limit=10`)
        .set('authorization', greedy);
      expect([more.status, more.body.code]).toEqual([503, 'UNAVAILABLE']);
      expect(more.headers['retry-after']).toBe('1');
      expect(held).toHaveLength(1);
    } finally {
      for (const release of held) release();
    }
  });
});
