import request from 'supertest';
import { Owner } from '@loom/session';
import { TurnAdmission } from '../src/turn/turn-admission';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** Headers that differ between any two requests, whoever asks. */
const VOLATILE = new Set([
  'date',
  'x-correlation-id',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
]);
const MISSING = 'c_doesnotexist0000000000';

/**
 * API.md: a conversation of another user answers exactly as one that does not exist. The turn
 * slots of a conversation (LOOM_MAX_TURNS_PER_CONVERSATION) are taken before the owner check: they
 * must be the owner's own, or another user of the tenant learns from a 409 that the conversation
 * exists and is busy, and takes its owner's slots with requests that end in 404.
 */
describe("a conversation's turn slots belong to its owner", () => {
  let orch: InProcessOrchestrator;
  const alice: Owner = { tenantId: 'tenant-slots', userId: 'alice' };
  const eve: Owner = { tenantId: 'tenant-slots', userId: 'eve' };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('turn_slots', {
      env: { LOOM_MAX_TURNS_PER_CONVERSATION: '1' },
    });
  });
  afterAll(() => orch?.close());

  const post = (who: Owner, id: string, content: string) =>
    request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', orch.auth(who.userId, who.tenantId))
      .send({ content });
  const headersOf = (res: request.Response) =>
    Object.fromEntries(Object.entries(res.headers).filter(([k]) => !VOLATILE.has(k)));

  async function aliceConversation(): Promise<string> {
    const created = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth(alice.userId, alice.tenantId))
      .send({});
    expect(created.status).toBe(201);
    return created.body.conversationId;
  }

  it("answers another user's turn on a busy conversation as on a missing one", async () => {
    const id = await aliceConversation();
    // alice's turn holds the conversation's one slot
    const release = orch.get(TurnAdmission).admit(alice, id);
    try {
      const theirs = await post(eve, id, 'is it busy?');
      const missing = await post(eve, MISSING, 'is it busy?');
      expect([theirs.status, theirs.body]).toEqual([missing.status, missing.body]);
      expect(theirs.body).toMatchObject({ statusCode: 404, code: 'NOT_FOUND' });
      expect(headersOf(theirs)).toEqual(headersOf(missing));
    } finally {
      release();
    }
  });

  it("leaves the owner's slots to the owner while another user's requests are in flight", async () => {
    const id = await aliceConversation();
    // eve's request to alice's id, admitted and not yet refused as not found
    const release = orch.get(TurnAdmission).admit(eve, id);
    try {
      // alice's own turn is admitted: it gets as far as its content check (413), not a 409
      const mine = await post(alice, id, 'x'.repeat(32_001));
      expect([mine.status, mine.body.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
    } finally {
      release();
    }
  });
});
