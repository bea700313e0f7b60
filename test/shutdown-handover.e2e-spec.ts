import { RunningSystem } from './system';
import { contiguous, logLines, runIndexSize, storedMessages, waitFor } from './faults.support';
import { orchestratorOn, startReplicas, turnStoppedMidway } from './handover.support';
import { startOrchestrator } from './rolling.support';

const HANDOVER_MS = 1500;
const INTERVAL_MS = 500;
/** The specialist's model call: longer than the orchestrator's grace before it is killed. */
const SPECIALIST_MS = 6000;
/** Far below the default 10 min lease the tasks keep (TASK_LEASE_MS is not shortened here). */
const COMPLETES_WITHIN_MS = 20_000;

/**
 * A rolling deploy stops an orchestrator replica (SIGTERM, then SIGKILL after its grace) while
 * a turn it runs waits for a slow specialist. The replica hands the task over: by SIGTERM +
 * SHUTDOWN_HANDOVER_MS it ends its lease and releases the lock (or, killed before that, its
 * lease was already capped there), and the other replica's scan resumes the task from its
 * checkpoint long before TASK_LEASE_MS (10 min, the default) would have run out. One reply,
 * the specialist's work done once.
 */
describe('system: an orchestrator stopped mid-turn hands its task over', () => {
  let sys: RunningSystem;
  let ports: number[];

  beforeAll(async () => {
    ({ sys, ports } = await startReplicas({
      replicas: 2,
      env: {
        RECOVERY_INTERVAL_MS: String(INTERVAL_MS),
        SHUTDOWN_HANDOVER_MS: String(HANDOVER_MS),
      },
      specialistMs: SPECIALIST_MS,
    }));
  });
  afterAll(() => sys?.stop());

  const on = (port: number) => orchestratorOn(sys, port);

  /** A turn through replica 0, stopped with SIGTERM and killed `graceMs` later. */
  async function stoppedMidTurn(tenant: string, graceMs: number) {
    const key = `${tenant}-1`;
    const { other, conversationId, content, taskId, first, stopping, stoppedAt } =
      await turnStoppedMidway(sys, ports, { tenant, graceMs, key });
    const done = await waitFor(
      async () => {
        const t = await other('GET', `/v1/tasks/${taskId}`).catch(() => null);
        return t?.body?.status === 'COMPLETED' ? t.body : null;
      },
      {
        what: 'the task completed by the other replica',
        intervalMs: 50,
        timeoutMs: COMPLETES_WITHIN_MS,
      },
    );
    const completedMs = Date.now() - stoppedAt;
    // When the other replica began resuming the task (its log line's own time).
    const resuming = on(ports[1])
      .lines.filter((l) => l.includes(`resuming ${taskId}`))
      .map((l) => Date.parse(JSON.parse(l).time));
    const resumedMs = resuming.length ? resuming[0] - stoppedAt : null;
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const retry = await other(
      'POST',
      `/v1/conversations/${conversationId}/messages`,
      { content },
      { 'idempotency-key': key },
    );
    const counts = {
      firstAnswer: await first,
      killed: stopping.signalCode === 'SIGKILL',
      handedOver: stopping.lines.filter((l) => l.includes(`handed ${taskId} over`)).length,
      recoveredByOther: on(ports[1]).lines.filter((l) => l.includes(`recovered ${taskId}`)).length,
      researchExecutions: logLines(sys, 'legal-research-agent', 'executing', { taskId }).length,
      laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
      executionRecords: done.executions.length,
      storedMessages: stored.length,
      replies: stored.filter((m) => m.role === 'assistant' && m.taskId === taskId).length,
      retry: [retry.status, retry.body?.taskId === taskId, retry.body?.reply?.seq],
      storedAfterRetry: (await storedMessages(sys.env.MYSQL_URL, conversationId)).length,
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    console.log(
      `hand-over (grace ${graceMs} ms, SHUTDOWN_HANDOVER_MS ${HANDOVER_MS}): resumed ${resumedMs} ms and completed ${completedMs} ms after SIGTERM (specialist ${SPECIALIST_MS} ms); ${JSON.stringify(counts)}`,
    );
    expect(contiguous(stored)).toBe(true);
    expect(stored.map((m) => [m.seq, m.role, m.taskId])).toEqual([
      [1, 'user', taskId],
      [2, 'assistant', taskId],
    ]);
    expect(done.executions.map((e: any) => [e.agentType, e.status])).toEqual([
      ['legal-research', 'COMPLETED'],
      ['labor-law', 'COMPLETED'],
    ]);
    // Restore replica 0 for the next case.
    await startOrchestrator(sys, ports[0]);
    return counts;
  }

  /** Either way: resumed once by the other replica, each agent run once, one reply stored. */
  const completedOnce = {
    recoveredByOther: 1,
    researchExecutions: 1,
    laborExecutions: 1,
    executionRecords: 2,
    storedMessages: 2,
    replies: 1,
    retry: [201, true, 2],
    storedAfterRetry: 2,
    runIndex: 0,
  };

  it('hands a turn it cannot finish within SHUTDOWN_HANDOVER_MS over; its client gets 503 UNAVAILABLE', async () => {
    const counts = await stoppedMidTurn('tenant-h1', 4000);
    expect(counts).toMatchObject({
      firstAnswer: { status: 503, code: 'UNAVAILABLE' },
      killed: false,
      handedOver: 1,
      ...completedOnce,
    });
  });

  it('killed before SHUTDOWN_HANDOVER_MS, its capped lease lets the other replica resume', async () => {
    const counts = await stoppedMidTurn('tenant-h2', 300);
    expect(counts).toMatchObject({ killed: true, handedOver: 0, ...completedOnce });
  });
});
