import { PrivateMariaDb, sleep } from '@loom/testing';
import { RunningSystem, startSystem } from './system';
import { contiguous, debugLogs, storedMessages, waitFor } from './faults.support';

const CONVERSATIONS = 6;
const DOWN_MS = 4000;
/** No request may take longer than this: a hang counts as status 0. */
const REQUEST_TIMEOUT_MS = 20_000;

interface Turn {
  conv: number;
  status: number;
  body: any;
  phase: 'before' | 'down' | 'after';
}

/**
 * The whole system on a MariaDB of this suite's own, killed (-9) in the middle of load and
 * started again on the same port. While it is down turns answer 503 UNAVAILABLE, never 500 or a
 * hang; every turn answered 201 is in MySQL exactly once when it is back; and new turns succeed
 * again without restarting any app (the pool reconnects by itself).
 */
describe('system: MySQL stopped mid-load', () => {
  let db: PrivateMariaDb;
  let sys: RunningSystem;

  beforeAll(async () => {
    db = await PrivateMariaDb.start();
    sys = await startSystem({
      env: { MYSQL_URL: `${db.url}/loom_faults`, LOOM_RATE_LIMIT_PER_MINUTE: '1000000' },
      // Turns last long enough that the outage catches some of them between two agents.
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: '300' } },
    });
  });
  afterAll(async () => {
    await sys?.stop();
    await db?.destroy();
  });

  it('answers 503 while it is down, loses no acknowledged turn, and resumes by itself', async () => {
    const token = sys.token('tenant-m', 'alice');
    const post = async (path: string, body: unknown): Promise<{ status: number; body: any }> => {
      try {
        const res = await fetch(`${sys.base}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        return { status: res.status, body: await res.json().catch(() => null) };
      } catch (err) {
        return { status: 0, body: String(err) };
      }
    };
    const ids: string[] = [];
    for (let i = 0; i < CONVERSATIONS; i++)
      ids.push((await post('/v1/conversations', {})).body.conversationId);

    let phase: Turn['phase'] = 'before';
    let stop = false;
    const turns: Turn[] = [];
    const recoveredAfterRestart = new Set<number>();
    const load = ids.map(async (id, conv) => {
      for (let n = 0; !stop || !recoveredAfterRestart.has(conv); n++) {
        const at = phase;
        const res = await post(`/v1/conversations/${id}/messages`, {
          content: `劳动合同问题 c${conv} n${n}`,
        });
        turns.push({ conv, status: res.status, body: res.body, phase: at });
        if (at === 'after' && res.status === 201) recoveredAfterRestart.add(conv);
        if (res.status !== 201) await sleep(100);
      }
    });

    await waitFor(() => turns.filter((t) => t.status === 201).length >= 3 * CONVERSATIONS, {
      what: 'load to be running',
    });
    await db.stop('SIGKILL');
    phase = 'down';
    const stoppedAt = Date.now();
    await waitFor(() => turns.some((t) => t.phase === 'down' && t.status === 503), {
      what: 'a 503 while MySQL is down',
    });
    const health = await fetch(`${sys.base}/health`);
    const healthBody = await health.json();
    await sleep(Math.max(0, DOWN_MS - (Date.now() - stoppedAt)));
    await db.restart();
    phase = 'after';
    const restartedAt = Date.now();
    stop = true;
    await Promise.all(load);
    const resumedMs = Date.now() - restartedAt;
    await waitFor(async () => (await fetch(`${sys.base}/health`)).status === 200, {
      what: 'health after MySQL returned',
    });

    // After the outage: one more turn in every conversation succeeds.
    const fresh = await Promise.all(
      ids.map((id) => post(`/v1/conversations/${id}/messages`, { content: '劳动合同问题 again' })),
    );

    const acked = [...turns, ...fresh.map((f, conv) => ({ ...f, conv }))].filter(
      (t) => t.status === 201,
    );
    const byStatus = turns.reduce<Record<string, number>>((m, t) => {
      const k = `${t.status}${t.body?.code ? ` ${t.body.code}` : ''}`;
      m[k] = (m[k] ?? 0) + 1;
      return m;
    }, {});
    const logs = await Promise.all(ids.map((id) => storedMessages(sys.env.MYSQL_URL, id)));
    const stored = logs.flat();
    const repliesPerTask = new Map<string, number>();
    for (const m of stored)
      if (m.role === 'assistant' && m.taskId)
        repliesPerTask.set(m.taskId, (repliesPerTask.get(m.taskId) ?? 0) + 1);
    const missing = acked.filter((t) => {
      const user = logs[t.conv].find((m) => m.seq === t.body.userMessage.seq);
      const reply = logs[t.conv].find((m) => m.seq === t.body.reply.seq);
      return (
        user?.content !== t.body.userMessage.content ||
        reply?.taskId !== t.body.taskId ||
        reply?.content !== t.body.reply.content
      );
    });
    const ackedTasks = new Set(acked.map((t) => t.body.taskId));
    const counts = {
      turns: turns.length,
      byStatus,
      health503WhileDown: health.status,
      resumedMs,
      acknowledged: acked.length,
      acknowledgedMissing: missing.length,
      storedMessages: stored.length,
      // Turns the outage interrupted after their user message: answered 503, nothing promised.
      unansweredUserMessages: stored.filter(
        (m) => m.role === 'user' && !repliesPerTask.has(m.taskId!),
      ).length,
      // Interrupted after their task was created: finished by the conversation's next turn.
      resumedReplies: stored.filter((m) => m.role === 'assistant' && !ackedTasks.has(m.taskId!))
        .length,
      maxRepliesPerTask: Math.max(...repliesPerTask.values()),
      ackedWithOneReply: acked.filter((t) => repliesPerTask.get(t.body.taskId) === 1).length,
    };
    console.log(`MySQL stopped mid-load: ${JSON.stringify(counts)}`);
    debugLogs(sys);

    expect(Object.keys(byStatus).sort()).toEqual(['201', '503 UNAVAILABLE']);
    expect(health.status).toBe(503);
    expect(healthBody).toMatchObject({
      code: 'UNAVAILABLE',
      details: { mysql: { status: 'down' }, redis: { status: 'up' } },
    });
    expect(fresh.map((f) => f.status)).toEqual(ids.map(() => 201));
    expect(counts.acknowledgedMissing).toBe(0);
    expect(counts.maxRepliesPerTask).toBe(1);
    expect(counts.ackedWithOneReply).toBe(acked.length);
    for (const log of logs) expect(contiguous(log)).toBe(true);
  });
});
