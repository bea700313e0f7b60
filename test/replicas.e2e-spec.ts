import { client, RunningSystem, startSystem } from './system';
import { contiguous, storedMessages, waitFor } from './faults.support';
const { freePort } = require('../scripts/lib/processes');

const CONVERSATIONS = 12;
const TURNS_PER_REPLICA = 2;

/**
 * Two orchestrator replicas behind no balancer: each conversation gets turns through both at
 * once. The conversation lock spans processes (turns of one conversation run one at a time,
 * whichever replica took them), and every agent's answer reaches the replica that asked.
 */
describe('system: two orchestrator replicas sharing conversations', () => {
  let sys: RunningSystem;
  let other: string;

  beforeAll(async () => {
    sys = await startSystem();
    const port = await freePort();
    sys.start('orchestrator', { PORT: String(port) });
    other = `http://127.0.0.1:${port}`;
    await waitFor(async () => (await fetch(`${other}/health`).catch(() => null))?.ok, {
      what: 'the second orchestrator',
      timeoutMs: 60_000,
    });
  });
  afterAll(() => sys?.stop());

  it('answers concurrent turns of one conversation through either replica, each stored once, in order', async () => {
    const token = sys.token('tenant-p', 'alice');
    const replicas = [client(sys.base, token), client(other, token)];
    const ids: string[] = [];
    for (let i = 0; i < CONVERSATIONS; i++)
      ids.push((await replicas[i % 2]('POST', '/v1/conversations', {})).body.conversationId);

    const sent = ids.flatMap((id) =>
      replicas.flatMap((api, r) =>
        Array.from({ length: TURNS_PER_REPLICA }, (_, t) => ({
          id,
          r,
          content: `我跟公司签的劳动合同有问题 (replica ${r}, turn ${t})`,
          api,
        })),
      ),
    );
    const answers = await Promise.all(
      sent.map(async (s) => ({
        ...s,
        res: await s.api('POST', `/v1/conversations/${s.id}/messages`, { content: s.content }),
      })),
    );
    const statuses: Record<string, number> = {};
    for (const a of answers) statuses[a.res.status] = (statuses[a.res.status] ?? 0) + 1;
    const ok = answers.filter((a) => a.res.status === 201);

    let storedTurns = 0;
    for (const id of ids) {
      const stored = await storedMessages(sys.env.MYSQL_URL, id);
      expect(contiguous(stored)).toBe(true);
      // Turns of a conversation never interleave: user, assistant, user, assistant …
      expect(stored.map((m) => m.role)).toEqual(
        stored.map((_, i) => (i % 2 === 0 ? 'user' : 'assistant')),
      );
      for (let i = 0; i < stored.length; i += 2)
        expect(stored[i + 1]?.taskId).toBe(stored[i].taskId);
      storedTurns += stored.length / 2;
      // Each acknowledged turn is there exactly once, with the reply its replica returned.
      for (const a of ok.filter((x) => x.id === id)) {
        const mine = stored.filter((m) => m.taskId === a.res.body.taskId);
        expect(mine.map((m) => [m.role, m.content])).toEqual([
          ['user', a.content],
          ['assistant', a.res.body.reply.content],
        ]);
      }
    }
    console.log(
      `two replicas: ${sent.length} turns over ${CONVERSATIONS} conversations, statuses ${JSON.stringify(statuses)}, ${storedTurns} turns stored`,
    );
    // Every turn is answered: 201, or 409 CONFLICT when the conversation stayed busy past the
    // lock wait; a 409 stored nothing.
    for (const a of answers) expect([201, 409]).toContain(a.res.status);
    expect(storedTurns).toBe(ok.length);
    // Each replica answered turns itself: the agents' answers reached the replica that asked.
    for (const r of [0, 1]) expect(ok.filter((a) => a.r === r).length).toBeGreaterThan(0);
  });
});
