import request from 'supertest';
import { Owner } from '@loom/session';
import { TurnAdmission } from '../src/turn/turn-admission';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * LOOM_MAX_TURNS_IN_FLIGHT bounds the turns one orchestrator holds, whoever sends them. One tenant
 * must not be able to take every slot (its turns slow, or many at once within its rate limit)
 * and so refuse every other tenant's turns with 503: a tenant holds at most
 * LOOM_MAX_TURNS_PER_TENANT of them, by default half of LOOM_MAX_TURNS_IN_FLIGHT.
 */
describe("one tenant's turns leave the other tenants their share of the slots", () => {
  let orch: InProcessOrchestrator;
  const greedy: Owner = { tenantId: 'tenant-greedy', userId: 'g' };
  const other: Owner = { tenantId: 'tenant-other', userId: 'o' };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('turn_tenants', {
      // the greedy tenant is one user: its share is the tenant's (LOOM_MAX_TURNS_PER_USER)
      env: { LOOM_MAX_TURNS_IN_FLIGHT: '4', LOOM_MAX_TURNS_PER_USER: '2' },
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
  const post = (who: Owner, id: string, content: string) =>
    request(server())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', orch.auth(who.userId, who.tenantId))
      .send({ content });

  it("admits another tenant's turn while one tenant asks for every slot", async () => {
    const [greedyId, otherId] = [await conversationOf(greedy), await conversationOf(other)];
    const admission = orch.get(TurnAdmission);
    // the greedy tenant's turns, each of a conversation of its own, as many as it is let hold
    const held: Array<() => void> = [];
    try {
      for (let i = 0; i < 4; i++) {
        try {
          held.push(admission.admit(greedy, `c_greedy${String(i).padStart(8, '0')}`));
        } catch {
          break;
        }
      }
      // the other tenant's turn is admitted: it gets as far as its content check (413)
      const theirs = await post(other, otherId, 'x'.repeat(32_001));
      expect([theirs.status, theirs.body.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
      // the greedy tenant's next one is refused at once, with when to retry
      const more = await post(greedy, greedyId, 'one more');
      expect([more.status, more.body.code]).toEqual([503, 'UNAVAILABLE']);
      expect(more.headers['retry-after']).toBe('1');
      expect(held).toHaveLength(2);
    } finally {
      for (const release of held) release();
    }
  });
});
