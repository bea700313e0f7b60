import { waitFor } from './faults.support';
import { useOverloadSystem } from './overload.support';
import { client } from './system';

const CAP = 6;
const PER_CONVERSATION = 2;
const FLOOD = 12;

/**
 * One conversation flooded with turns (they run one at a time, under its lock) must not take
 * every turn slot of the orchestrator (LOOM_MAX_TURNS_IN_FLIGHT): past
 * LOOM_MAX_TURNS_PER_CONVERSATION a turn of that conversation is 409 CONFLICT at once, as it
 * would be after the lock wait, and another tenant's turn still runs. On a Redis and a MariaDB of
 * this suite's own, with agents slower than the turns arrive.
 */
describe('system: one conversation flooded with turns', () => {
  const suite = useOverloadSystem('loom_overload_conv', {
    LOOM_MAX_TURNS_IN_FLIGHT: String(CAP),
    LOOM_MAX_TURNS_PER_CONVERSATION: String(PER_CONVERSATION),
    LLM_OFFLINE_DELAY_MS: '3000',
  });

  it("refuses the flood's excess with 409 and keeps serving other tenants", async () => {
    const { sys } = suite;
    const mallory = client(sys.base, sys.token('tenant-flood', 'mallory'));
    const alice = client(sys.base, sys.token('tenant-quiet', 'alice'));
    const flooded = (await mallory('POST', '/v1/conversations', {})).body.conversationId;
    const quiet = (await alice('POST', '/v1/conversations', {})).body.conversationId;

    const answers: { status: number; body: any }[] = [];
    const flood = Array.from({ length: FLOOD }, async (_, i) => {
      const res = await mallory('POST', `/v1/conversations/${flooded}/messages`, {
        content: `劳动合同问题 ${i}`,
      });
      answers.push({ status: res.status, body: res.body });
    });
    // The agents take seconds: the refusals come while the admitted turns still run or wait.
    await waitFor(() => answers.length >= FLOOD - CAP, { what: 'the refused turns' });
    const other = await alice('POST', `/v1/conversations/${quiet}/messages`, {
      content: '劳动合同问题 alice',
    });
    await Promise.all(flood);

    expect(other.status).toBe(201);
    const refused = answers.filter((a) => a.status !== 201);
    expect(refused.length).toBeGreaterThanOrEqual(FLOOD - PER_CONVERSATION);
    for (const a of refused) expect(a.body).toMatchObject({ statusCode: 409, code: 'CONFLICT' });
    // Afterwards the conversation takes turns again (no count left behind).
    const after = await mallory('POST', `/v1/conversations/${flooded}/messages`, {
      content: '劳动合同问题 after',
    });
    expect(after.status).toBe(201);
  });
});
