import { AppProcess, client, RunningSystem } from './system';
import { contiguous, logLines, runIndexSize, storedMessages, waitFor } from './faults.support';
import { orchestratorOn, specialistAtWork, startReplicas } from './handover.support';
import { startOrchestrator } from './rolling.support';
const { stopAll } = require('../scripts/lib/processes');

const LEASE_MS = 3000;
const HANDOVER_MS = 1500;
/** Only the scans at start: a task is finished here by a turn, or by a stopping replica's signal. */
const INTERVAL_MS = 600_000;
const SPECIALIST_MS = 6000;
const CONTENT = '我跟公司签的劳动合同有问题';

type Answer = { status: number | string; code?: string; body?: any; ms: number };

/**
 * An orchestrator dies (or pauses) mid-turn holding its conversation's lock, which lives on
 * until its TTL (30 s). A turn on another replica that finds the lock held by a worker whose task
 * lease has expired takes it over, as recovery does (the stale token from the run index, a new
 * fence), finishes that task and goes on: the retry with the same Idempotency-Key gets its
 * TurnView instead of 409 CONFLICT, a new message queues behind it. One reply, the specialist's
 * work done once; a paused former holder that wakes up is fenced out.
 */
describe('system: a turn takes over the lock of a worker whose lease expired', () => {
  let sys: RunningSystem;
  let ports: number[];

  beforeAll(async () => {
    ({ sys, ports } = await startReplicas({
      replicas: 2,
      env: {
        TASK_LEASE_MS: String(LEASE_MS),
        RECOVERY_INTERVAL_MS: String(INTERVAL_MS),
        SHUTDOWN_HANDOVER_MS: String(HANDOVER_MS),
      },
      specialistMs: SPECIALIST_MS,
    }));
  });
  afterAll(() => sys?.stop());

  const on = (port: number) => orchestratorOn(sys, port);

  async function post(
    api: ReturnType<typeof client>,
    conversationId: string,
    content: string,
    key?: string,
  ): Promise<Answer> {
    const started = Date.now();
    const headers: Record<string, string> = key ? { 'idempotency-key': key } : {};
    return api('POST', `/v1/conversations/${conversationId}/messages`, { content }, headers).then(
      (r) => ({ status: r.status, code: r.body?.code, body: r.body, ms: Date.now() - started }),
      (err) => ({ status: err.cause?.code ?? err.name, ms: Date.now() - started }),
    );
  }

  /** A turn through replica 0 whose specialist is at work; `stop` then stops replica 0. */
  async function interrupted(tenant: string, stop: (replica: AppProcess) => Promise<void>) {
    const alice = client(sys.base, sys.token(tenant, 'alice'));
    const other = client(`http://127.0.0.1:${ports[1]}`, sys.token(tenant, 'alice'));
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const key = `${tenant}-1`;
    const first = post(alice, conversationId, CONTENT, key);
    const working = await specialistAtWork(sys, conversationId);
    const replica = on(ports[0]);
    const stoppedAt = Date.now();
    await stop(replica);
    return {
      other,
      conversationId,
      key,
      first,
      replica,
      stoppedAt,
      taskId: working.taskId as string,
    };
  }

  async function counts(
    t: Awaited<ReturnType<typeof interrupted>>,
    extra: Record<string, unknown>,
  ) {
    const { taskId, conversationId } = t;
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const lines = (what: string) => logLines(sys, 'orchestrator', what).length;
    const c = {
      ...extra,
      takenOverByTurn: lines(`took over the lock of ${taskId}`),
      recoveredByScan: lines(`recovered ${taskId}`),
      researchExecutions: logLines(sys, 'legal-research-agent', 'executing', { taskId }).length,
      laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
      replies: stored.filter((m) => m.role === 'assistant' && m.taskId === taskId).length,
      storedMessages: stored.length,
      contiguous: contiguous(stored),
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    return { c, stored };
  }

  it('a retry after a pause past the lease takes the lock over; the woken holder is fenced out', async () => {
    const t = await interrupted('tenant-l1', async (r) => void r.kill('SIGSTOP'));
    let retry: Answer;
    try {
      retry = await post(t.other, t.conversationId, CONTENT, t.key);
    } finally {
      t.replica.kill('SIGCONT');
    }
    const first = await t.first;
    // The woken holder's writes are refused; give it time to try them all.
    await waitFor(() => t.replica.lines.some((l) => l.includes('request completed')), {
      what: 'the woken holder to answer',
      intervalMs: 50,
      timeoutMs: 10_000,
    }).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 1000));
    const { c, stored } = await counts(t, {
      retry: [retry.status, retry.body?.taskId === t.taskId, retry.body?.reply?.seq],
      retryMs: retry.ms,
      firstAnswer: [first.status, first.code],
    });
    console.log(`paused holder (lease ${LEASE_MS} ms): ${JSON.stringify(c)}`);
    expect(c).toMatchObject({
      retry: [201, true, 2],
      takenOverByTurn: 1,
      recoveredByScan: 0,
      researchExecutions: 1,
      laborExecutions: 1,
      replies: 1,
      storedMessages: 2,
      contiguous: true,
      runIndex: 0,
    });
    expect(first.status).not.toBe(201);
    expect(stored.map((m) => [m.seq, m.role, m.taskId])).toEqual([
      [1, 'user', t.taskId],
      [2, 'assistant', t.taskId],
    ]);
  });

  it('killed (SIGTERM, SIGKILL 300 ms later): the retry gets the TurnView, not 409', async () => {
    const t = await interrupted('tenant-l2', async (r) => {
      await stopAll([r], 'SIGTERM', 300);
      sys.children = sys.children.filter((c) => c !== r);
    });
    try {
      const retry = await post(t.other, t.conversationId, CONTENT, t.key);
      const answeredMs = Date.now() - t.stoppedAt;
      const { c } = await counts(t, {
        retry: [retry.status, retry.body?.taskId === t.taskId, retry.body?.reply?.seq],
        retryMs: retry.ms,
        answeredMs,
      });
      console.log(`SIGTERM + SIGKILL (lease ${LEASE_MS} ms): ${JSON.stringify(c)}`);
      expect(c).toMatchObject({
        retry: [201, true, 2],
        researchExecutions: 1,
        laborExecutions: 1,
        replies: 1,
        storedMessages: 2,
        contiguous: true,
      });
      // Either the retry or the scan the stopping replica's signal set off finishes it, once.
      expect(Number(c.takenOverByTurn) + Number(c.recoveredByScan)).toBe(1);
    } finally {
      await startOrchestrator(sys, ports[0]);
    }
  });

  it('killed (SIGKILL): a new message takes the lock over and queues behind the task', async () => {
    const t = await interrupted('tenant-l3', async (r) => {
      await stopAll([r], 'SIGKILL');
      sys.children = sys.children.filter((c) => c !== r);
    });
    try {
      const next = await post(t.other, t.conversationId, 'What about the non-compete part?');
      const retry = await post(t.other, t.conversationId, CONTENT, t.key);
      const { c, stored } = await counts(t, {
        next: [next.status, next.body?.userMessage?.seq, next.body?.reply?.seq],
        nextMs: next.ms,
        retry: [retry.status, retry.body?.taskId === t.taskId, retry.body?.reply?.seq],
      });
      console.log(`SIGKILL (lease ${LEASE_MS} ms), then a new message: ${JSON.stringify(c)}`);
      expect(c).toMatchObject({
        next: [201, 3, 4],
        retry: [201, true, 2],
        takenOverByTurn: 1,
        recoveredByScan: 0,
        researchExecutions: 1,
        laborExecutions: 1,
        replies: 1,
        storedMessages: 4,
        contiguous: true,
        runIndex: 0,
      });
      expect(stored.map((m) => [m.seq, m.role])).toEqual([
        [1, 'user'],
        [2, 'assistant'],
        [3, 'user'],
        [4, 'assistant'],
      ]);
    } finally {
      await startOrchestrator(sys, ports[0]);
    }
  });
});
