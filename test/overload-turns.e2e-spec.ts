import { parsePrometheusText } from '@loom/testing';
import { waitFor } from './faults.support';
import { useOverloadSystem } from './overload.support';
import { client } from './system';

const CAP = 3;
const FLOOD = 12;
/** No request may take longer than this: a hang counts as status 0. */
const REQUEST_TIMEOUT_MS = 60_000;

interface Answer {
  status: number;
  body: any;
  retryAfter: string | null;
  contentType: string | null;
}

/**
 * A flood of turns on one orchestrator whose agents are slower than the arrival rate, on a Redis
 * and a MariaDB of this suite's own. Past LOOM_MAX_TURNS_IN_FLIGHT a turn is refused at once with
 * 503 UNAVAILABLE and Retry-After (a streamed one too, as JSON, before any stream) instead of
 * holding memory and a connection while it queues; every turn answered 201 is stored, and once
 * the flood is over the refused turns go through with their Idempotency-Key (no slot leaked).
 */
describe('system: more turns at once than the orchestrator admits', () => {
  const suite = useOverloadSystem('loom_overload', {
    LOOM_MAX_TURNS_IN_FLIGHT: String(CAP),
    // one tenant of one user: its share is every slot (LOOM_MAX_TURNS_PER_TENANT, _PER_USER)
    LOOM_MAX_TURNS_PER_TENANT: String(CAP),
    LOOM_MAX_TURNS_PER_USER: String(CAP),
    LLM_OFFLINE_DELAY_MS: '3000',
  });

  it('refuses turns past the cap with 503 and Retry-After, loses none it took, and recovers', async () => {
    const { sys } = suite;
    const token = sys.token('tenant-flood', 'alice');
    const api = client(sys.base, token);
    const post = async (id: string, key: string, accept = 'application/json'): Promise<Answer> => {
      try {
        const res = await fetch(`${sys.base}/v1/conversations/${id}/messages`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${token}`,
            'idempotency-key': key,
            accept,
          },
          body: JSON.stringify({ content: `劳动合同问题 ${key}` }),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        const text = await res.text();
        let body: any = text;
        try {
          body = JSON.parse(text);
        } catch {
          // an SSE body
        }
        return {
          status: res.status,
          body,
          retryAfter: res.headers.get('retry-after'),
          contentType: res.headers.get('content-type'),
        };
      } catch (err) {
        return { status: 0, body: String(err), retryAfter: null, contentType: null };
      }
    };
    const ids: string[] = [];
    for (let i = 0; i < FLOOD + 1; i++)
      ids.push((await api('POST', '/v1/conversations', {})).body.conversationId);

    const answers: (Answer | undefined)[] = [];
    const flood = ids.slice(0, FLOOD).map(async (id, i) => {
      answers[i] = await post(id, `flood-${i}`);
    });
    // The agents take seconds: a refusal, if any, comes while the admitted turns still run.
    await Promise.race([
      Promise.all(flood),
      waitFor(() => answers.some((a) => a?.status === 503), {
        what: 'a refused turn',
        timeoutMs: REQUEST_TIMEOUT_MS,
      }).catch(() => undefined),
    ]);
    const streamed = await post(ids[FLOOD], 'streamed', 'text/event-stream');
    await Promise.all(flood);

    const statuses = answers.map((a) => a!.status);
    const refused = answers.filter((a) => a!.status === 503) as Answer[];
    expect(refused.length).toBeGreaterThan(0);
    expect(statuses.every((s) => s === 201 || s === 503)).toBe(true);
    expect(statuses.filter((s) => s === 201).length).toBeLessThanOrEqual(CAP);
    for (const a of refused) {
      expect(a.body).toMatchObject({ statusCode: 503, code: 'UNAVAILABLE' });
      expect(Number(a.retryAfter)).toBeGreaterThan(0);
    }
    // A streamed turn past the cap is refused as JSON, before any stream starts.
    expect(streamed.status).toBe(503);
    expect(streamed.contentType).toMatch(/application\/json/);
    expect(Number(streamed.retryAfter)).toBeGreaterThan(0);

    // Nothing acknowledged is lost: every 201's reply is in its conversation.
    for (const [i, a] of answers.entries()) {
      if (a!.status !== 201) continue;
      const stored = await api('GET', `/v1/conversations/${ids[i]}/messages`);
      expect(stored.body.items.map((m: any) => m.content)).toContain(a!.body.reply.content);
    }

    // Once the flood is over no slot is left taken: each refused turn goes through on its retry.
    const inFlight = async () =>
      parsePrometheusText(await (await fetch(`${sys.base}/metrics`)).text()).get(
        'loom_turns_in_flight',
      )?.[0]?.value;
    expect(await inFlight()).toBe(0);
    for (const [i, a] of answers.entries())
      if (a!.status === 503) expect((await post(ids[i], `flood-${i}`)).status).toBe(201);
    expect((await post(ids[FLOOD], 'streamed', 'text/event-stream')).status).toBe(200);
    expect(await inFlight()).toBe(0);
  });
});
