import request from 'supertest';
import { Owner } from '@loom/session';
import { MessageReadAdmission } from '../src/conversations/message-read-admission';
import { TurnAdmission } from '../src/turn/turn-admission';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * A tenant's share of the turn slots and of the messages read at once is shared by its users:
 * one user sending slow turns, or reading large pages, must not take the whole share and refuse
 * every other user of the tenant with 503. A user holds at most LOOM_MAX_TURNS_PER_USER turns and
 * LOOM_MAX_MESSAGES_READ_PER_USER messages, by default half of the tenant's.
 */
describe("one user's turns and reads leave the other users of the tenant their share", () => {
  let orch: InProcessOrchestrator;
  const greedy: Owner = { tenantId: 'tenant-shared', userId: 'greedy' };
  const other: Owner = { tenantId: 'tenant-shared', userId: 'other' };

  beforeAll(async () => {
    // the tenant's share: 4 turns, 500 messages (half of the bounds, the defaults)
    orch = await startInProcessOrchestrator('user_share', {
      env: { LOOM_MAX_TURNS_IN_FLIGHT: '8', LOOM_MAX_MESSAGES_READ_IN_FLIGHT: '1000' },
    });
  });
  afterAll(() => orch?.close());

  const server = () => orch.app.getHttpServer();
  const conversationOf = async (who: Owner): Promise<string> => {
    const created = await request(server())
      .post('/v1/conversations')
      .set('authorization', orch.auth(who.userId, who.tenantId))
      .send({});
    expect(created.status).toBe(201);
    return created.body.conversationId;
  };

  it("admits another user's turn while one user of the tenant asks for every slot", async () => {
    const [greedyId, otherId] = [await conversationOf(greedy), await conversationOf(other)];
    const admission = orch.get(TurnAdmission);
    // the greedy user's turns, each of a conversation of its own, as many as it is let hold
    const held: Array<() => void> = [];
    const post = (who: Owner, id: string, content: string) =>
      request(server())
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', orch.auth(who.userId, who.tenantId))
        .send({ content });
    try {
      for (let i = 0; i < 8; i++) {
        try {
          held.push(admission.admit(greedy, `c_greedy${String(i).padStart(8, '0')}`));
        } catch {
          break;
        }
      }
      // the other user's turn is admitted: it gets as far as its content check (413)
      const theirs = await post(other, otherId, 'x'.repeat(32_001));
      expect([theirs.status, theirs.body.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
      // the greedy user's next one is refused at once, with when to retry
      const more = await post(greedy, greedyId, 'one more');
      expect([more.status, more.body.code]).toEqual([503, 'UNAVAILABLE']);
      expect(more.headers['retry-after']).toBe('1');
      expect(held).toHaveLength(2);
    } finally {
      for (const release of held) release();
    }
  });

  it("reads another user's page while one user of the tenant holds as many pages as it may", async () => {
    const [greedyId, otherId] = [await conversationOf(greedy), await conversationOf(other)];
    const admission = orch.get(MessageReadAdmission);
    const page = (who: Owner, id: string, limit: number) =>
      request(server())
        .get(`/v1/conversations/${id}/messages?limit=${limit}`)
        .set('authorization', orch.auth(who.userId, who.tenantId));
    // the greedy user's pages of 200 being built, as many as it is let hold
    const held: Array<() => void> = [];
    try {
      for (let i = 0; i < 5; i++) {
        try {
          held.push(admission.admit(200, greedy));
        } catch {
          break;
        }
      }
      const theirs = await page(other, otherId, 200);
      expect([theirs.status, theirs.body]).toEqual([200, { items: [] }]);
      // the greedy user's next page is refused at once, with when to retry
      const more = await page(greedy, greedyId, 100);
      expect([more.status, more.body.code]).toEqual([503, 'UNAVAILABLE']);
      expect(more.headers['retry-after']).toBe('1');
      expect(held).toHaveLength(1);
    } finally {
      for (const release of held) release();
    }
  });
});
