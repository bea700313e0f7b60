import Redis from 'ioredis';
import { NO_AGENTS, useOverloadSystem } from './overload.support';
import { client } from './system';

/** Messages the pages read at once may hold: two pages of 200. */
const CAP = 400;
const READS = 12;

/**
 * Many reads of the largest message pages at once (200 replies of up to 100,000 characters each:
 * tens of MB a page) on a Redis and a MariaDB of this suite's own. Past
 * LOOM_MAX_MESSAGES_READ_IN_FLIGHT a page is refused at once with 503 UNAVAILABLE and
 * Retry-After instead of being built alongside all the others until the orchestrator runs out of
 * memory; once they are over, every read answers again (no slot leaked).
 */
describe('system: more message pages read at once than the orchestrator admits', () => {
  const suite = useOverloadSystem(
    'loom_overload_messages',
    // one tenant of one user: its share is the whole bound (LOOM_MAX_MESSAGES_READ_PER_TENANT,
    // _PER_USER)
    {
      LOOM_MAX_MESSAGES_READ_IN_FLIGHT: String(CAP),
      LOOM_MAX_MESSAGES_READ_PER_TENANT: String(CAP),
      LOOM_MAX_MESSAGES_READ_PER_USER: String(CAP),
    },
    { without: NO_AGENTS },
  );

  it('refuses pages past the cap with 503 and Retry-After, then answers again', async () => {
    const { sys, redis } = suite;
    const token = sys.token('tenant-pages', 'alice');
    const id = (await client(sys.base, token)('POST', '/v1/conversations', {})).body.conversationId;
    const read = async () => {
      const res = await fetch(`${sys.base}/v1/conversations/${id}/messages?limit=200`, {
        headers: { authorization: `Bearer ${token}` },
        signal: AbortSignal.timeout(60_000),
      });
      return {
        status: res.status,
        body: await res.json(),
        retryAfter: res.headers.get('retry-after'),
      };
    };

    // This suite's own Redis holds every client for a moment: the reads admitted stay in flight
    // while the others arrive.
    const admin = new Redis(redis.url);
    await admin.call('CLIENT', 'PAUSE', '1500', 'ALL');
    const answers = await Promise.all(Array.from({ length: READS }, read));
    await admin.quit();

    const refused = answers.filter((a) => a.status === 503);
    expect(answers.filter((a) => a.status === 200).length).toBeLessThanOrEqual(CAP / 200);
    expect(refused.length).toBeGreaterThanOrEqual(READS - CAP / 200);
    for (const a of refused) {
      expect(a.body).toMatchObject({ statusCode: 503, code: 'UNAVAILABLE' });
      expect(Number(a.retryAfter)).toBeGreaterThan(0);
    }

    // The flood over, no slot is left taken.
    const after = await Promise.all(Array.from({ length: CAP / 200 }, read));
    expect(after.map((a) => a.status)).toEqual(Array(CAP / 200).fill(200));
  });
});
