import { AppProcess, client, RunningSystem, startSystem } from './system';
import { contiguous, storedMessages, waitFor } from './faults.support';
import { errorLines, startOrchestrator, storedTasks } from './rolling.support';
const { freePort } = require('../scripts/lib/processes');

const WORKERS = 6;
const CLIENT_TIMEOUT_MS = 60_000;
const RETRY_FOR_MS = 90_000;

interface Attempt {
  phase: string;
  port: number;
  status: number | string;
  code?: string;
  ms: number;
}
interface Turn {
  conversationId: string;
  content: string;
  key: string;
  attempts: Attempt[];
  final: number | string;
  body?: any;
}

/**
 * A rolling restart under load: two orchestrator replicas, two instances of every agent, turns
 * sent steadily through both replicas (a client retries a failed turn on the other replica with
 * the same Idempotency-Key). Every process is restarted one by one, first gracefully (SIGTERM,
 * 30 s grace), then SIGTERM with a SIGKILL after a short grace.
 */
describe('system: rolling restart under load', () => {
  let sys: RunningSystem;
  const ports: number[] = [];

  beforeAll(async () => {
    sys = await startSystem({
      env: {
        LLM_OFFLINE_DELAY_MS: '150',
        AGENT_CLAIM_IDLE_MS: '4000',
        AGENT_TIMEOUT_MS: '40000',
        RECOVERY_INTERVAL_MS: '1000',
        LOOM_RATE_LIMIT_PER_MINUTE: '0',
      },
      instances: { 'legal-research-agent': 2, 'labor-law-agent': 2, 'contract-law-agent': 2 },
    });
    ports.push(Number(new URL(sys.base).port), await freePort());
    await startOrchestrator(sys, ports[1]);
  }, 120_000);
  afterAll(() => sys?.stop());

  let phase = 'warmup';
  async function send(token: string, port: number, t: Turn): Promise<Attempt> {
    const started = Date.now();
    try {
      const res = await fetch(
        `http://127.0.0.1:${port}/v1/conversations/${t.conversationId}/messages`,
        {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            authorization: `Bearer ${token}`,
            'idempotency-key': t.key,
          },
          body: JSON.stringify({ content: t.content }),
          signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
        },
      );
      const text = await res.text();
      let body: any = null;
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
      if (res.status === 201) t.body = body;
      return { phase, port, status: res.status, code: body?.code, ms: Date.now() - started };
    } catch (err) {
      const e = err as Error & { cause?: { code?: string } };
      return {
        phase,
        port,
        status: e.name === 'TimeoutError' ? 'HANG' : (e.cause?.code ?? e.name),
        ms: Date.now() - started,
      };
    }
  }

  it('stores every acknowledged turn exactly once and leaves nothing RUNNING', async () => {
    const token = sys.token('tenant-roll', 'alice');
    const api = client(sys.base, token);
    const turns: Turn[] = [];
    let stop = false;
    const worker = async (w: number) => {
      const conversationId = (await api('POST', '/v1/conversations', {})).body.conversationId;
      for (let n = 0; !stop; n++) {
        const t: Turn = {
          conversationId,
          content: `我跟公司签的劳动合同有问题 (worker ${w}, turn ${n})`,
          key: `w${w}-t${n}`,
          attempts: [],
          final: 'none',
        };
        turns.push(t);
        const deadline = Date.now() + RETRY_FOR_MS;
        for (let i = w; Date.now() < deadline; i++) {
          const a = await send(token, ports[i % ports.length], t);
          t.attempts.push(a);
          t.final = a.status;
          if (typeof a.status === 'number' && a.status < 500 && a.status !== 409) break;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    };
    const load = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
    await pause(3000);

    const restartAll = async (signal: 'SIGTERM', graceMs: number) => {
      const targets = [...sys.children];
      for (const c of targets) {
        const port = c.app === 'orchestrator' ? ports.find((p) => isOn(c, p)) : undefined;
        await killWithGrace(c, signal, graceMs);
        if (c.app === 'orchestrator') await startOrchestrator(sys, port!);
        else {
          const fresh = sys.start(c.app);
          await waitFor(() => fresh.lines.some((l) => l.includes('agent listening')), {
            what: `${c.app} to listen`,
            timeoutMs: 60_000,
          });
        }
        await pause(1500);
      }
    };
    const isOn = (c: AppProcess, port: number) =>
      c.lines.some((l) => l.includes('orchestrator listening on port ' + port));
    const killWithGrace = async (c: AppProcess, signal: NodeJS.Signals, graceMs: number) => {
      const gone = new Promise((r) => c.once('exit', r));
      c.kill(signal);
      const t = setTimeout(() => c.kill('SIGKILL'), graceMs);
      await gone;
      clearTimeout(t);
      sys.children = sys.children.filter((x) => x !== c);
    };
    const phases: Record<string, number> = {};
    let started = Date.now();
    phase = 'graceful';
    await restartAll('SIGTERM', 30_000);
    phases.gracefulMs = Date.now() - started;
    const turnsAfterGraceful = turns.length;
    started = Date.now();
    phase = 'killed';
    await restartAll('SIGTERM', 300);
    phase = 'after';
    phases.killedMs = Date.now() - started;
    await pause(2000);
    stop = true;
    await load;

    // Nothing stays RUNNING: wait (bounded) for every task to settle.
    let settledMs = 0;
    const settleStart = Date.now();
    const running = await waitFor(
      async () => {
        const r = (await storedTasks(sys.env.MYSQL_URL)).filter((t) => t.status === 'RUNNING');
        settledMs = Date.now() - settleStart;
        return r.length === 0 ? [] : null;
      },
      { what: 'no task RUNNING', intervalMs: 500, timeoutMs: 60_000 },
    ).catch(async () =>
      (await storedTasks(sys.env.MYSQL_URL)).filter((t) => t.status === 'RUNNING'),
    );

    const statuses: Record<string, number> = {};
    const attemptStatuses: Record<string, number> = {};
    for (const t of turns) statuses[String(t.final)] = (statuses[String(t.final)] ?? 0) + 1;
    for (const t of turns)
      for (const a of t.attempts) {
        const k = `${a.phase} ${a.status}${a.code ? ' ' + a.code : ''}`;
        attemptStatuses[k] = (attemptStatuses[k] ?? 0) + 1;
      }
    const problems: string[] = [];
    const conversations = [...new Set(turns.map((t) => t.conversationId))];
    let storedTurns = 0;
    for (const id of conversations) {
      const stored = await storedMessages(sys.env.MYSQL_URL, id);
      if (!contiguous(stored)) problems.push(`${id}: seqs not contiguous`);
      const users = stored.filter((m) => m.role === 'user');
      storedTurns += users.length;
      const seen = new Map<string, number>();
      for (const m of users) seen.set(m.content, (seen.get(m.content) ?? 0) + 1);
      for (const [c, n] of seen) if (n > 1) problems.push(`${id}: "${c}" stored ${n} times`);
      for (const t of turns.filter((x) => x.conversationId === id && x.final === 201)) {
        const mine = stored.filter((m) => m.taskId === t.body.taskId);
        if (mine.length !== 2 || mine[0].content !== t.content)
          problems.push(`${id}: acknowledged ${t.key} stored as ${mine.length} rows`);
      }
    }
    const slow = turns.flatMap((t) => t.attempts).filter((a) => a.ms > 45_000).length;
    const errors = errorLines(sys);
    console.log(
      `rolling restart: ${JSON.stringify({ turns: turns.length, turnsAfterGraceful, phases, statuses, attemptStatuses, storedTurns, settledMs, stillRunning: running.length, slowAttempts: slow, problems: problems.slice(0, 20), errors: errors.length })}`,
    );
    for (const e of errors.slice(0, 30)) console.log(e);
    for (const t of turns.filter((x) => x.attempts.some((a) => a.status !== 201)).slice(0, 40))
      console.log(`turn ${t.key}: ${JSON.stringify(t.attempts)}`);
    expect(problems).toEqual([]);
    expect(running).toEqual([]);
    expect(errors).toEqual([]);
    // Every turn was answered in the end (its client retried with the same key), and no attempt
    // hung until the client's time-out.
    expect(statuses).toEqual({ 201: turns.length });
    expect(turns.flatMap((t) => t.attempts).filter((a) => a.status === 'HANG')).toEqual([]);
  }, 600_000);
});
