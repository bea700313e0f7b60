import { AppProcess, client, RunningSystem } from './system';
import { contiguous, logLines, runIndexSize, storedMessages, waitFor } from './faults.support';
import { orchestratorOn, startReplicas, turnStoppedMidway } from './handover.support';
import { startOrchestrator } from './rolling.support';

const HANDOVER_MS = 1500;
/** The default scan interval: without a prompt pick-up a task would wait up to this long. */
const INTERVAL_MS = 30_000;
const SPECIALIST_MS = 6000;
/** Well under INTERVAL_MS: only a prompt pick-up completes the task in time. */
const COMPLETES_WITHIN_MS = 20_000;

/**
 * An orchestrator replica stopped mid-turn while no client retries: the other replica resumes
 * the task as soon as it is free to (the stopping replica tells it when), not at its next scan
 * RECOVERY_INTERVAL_MS (30 s) later. Handed over (SIGTERM, grace past SHUTDOWN_HANDOVER_MS) and
 * killed before the hand-over (its leases were capped at SIGTERM): one reply either way, the
 * specialist's work done once, exactly one replica recovering.
 */
describe('system: a task handed over is picked up at once, not at the next scan', () => {
  let sys: RunningSystem;
  let ports: number[];

  beforeAll(async () => {
    ({ sys, ports } = await startReplicas({
      replicas: 3,
      env: {
        RECOVERY_INTERVAL_MS: String(INTERVAL_MS),
        SHUTDOWN_HANDOVER_MS: String(HANDOVER_MS),
      },
      specialistMs: SPECIALIST_MS,
    }));
  });
  afterAll(() => sys?.stop());

  const on = (port: number) => orchestratorOn(sys, port);

  /** A turn through replica 0, stopped with SIGTERM and killed `graceMs` later; nobody retries. */
  async function stoppedWithoutRetry(tenant: string, graceMs: number) {
    const { other, conversationId, taskId, first, stopping, stoppedAt } = await turnStoppedMidway(
      sys,
      ports,
      { tenant, graceMs },
    );
    try {
      return await pickedUp(other, stopping, stoppedAt, { conversationId, taskId, first, graceMs });
    } finally {
      // Restore replica 0 for the next case.
      await startOrchestrator(sys, ports[0]);
    }
  }

  async function pickedUp(
    other: ReturnType<typeof client>,
    stopping: AppProcess,
    stoppedAt: number,
    turn: { conversationId: string; taskId: string; first: Promise<unknown>; graceMs: number },
  ) {
    const { conversationId, taskId, first, graceMs } = turn;
    const done = await waitFor(
      async () => {
        const t = await other('GET', `/v1/tasks/${taskId}`).catch(() => null);
        return t?.body?.status === 'COMPLETED' ? t.body : null;
      },
      {
        what: 'the task completed without a retry',
        intervalMs: 50,
        timeoutMs: COMPLETES_WITHIN_MS,
      },
    );
    const completedMs = Date.now() - stoppedAt;
    const replicas = [on(ports[1]), on(ports[2])];
    const resuming = replicas
      .flatMap((r) => r.lines.filter((l) => l.includes(`resuming ${taskId}`)))
      .map((l) => Date.parse(JSON.parse(l).time));
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const counts = {
      firstAnswer: await first,
      killed: stopping.signalCode === 'SIGKILL',
      handedOver: stopping.lines.filter((l) => l.includes(`handed ${taskId} over`)).length,
      recoveredBy: replicas.map(
        (r) => r.lines.filter((l) => l.includes(`recovered ${taskId}`)).length,
      ),
      researchExecutions: logLines(sys, 'legal-research-agent', 'executing', { taskId }).length,
      laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
      executionRecords: done.executions.length,
      replies: stored.filter((m) => m.role === 'assistant' && m.taskId === taskId).length,
      storedMessages: stored.length,
    };
    // Both replicas heard the stopping one; give the loser time to misbehave before counting.
    await new Promise((r) => setTimeout(r, 1000));
    counts.recoveredBy = replicas.map(
      (r) => r.lines.filter((l) => l.includes(`recovered ${taskId}`)).length,
    );
    const runIndex = await runIndexSize(sys.env.MYSQL_URL);
    console.log(
      `pick-up without a retry (grace ${graceMs} ms, SHUTDOWN_HANDOVER_MS ${HANDOVER_MS}, ` +
        `RECOVERY_INTERVAL_MS ${INTERVAL_MS}): resumed ${resuming.length ? resuming[0] - stoppedAt : null} ms ` +
        `and completed ${completedMs} ms after SIGTERM (specialist ${SPECIALIST_MS} ms); ` +
        `${JSON.stringify({ ...counts, runIndex })}`,
    );
    expect(contiguous(stored)).toBe(true);
    expect(stored.map((m) => [m.seq, m.role, m.taskId])).toEqual([
      [1, 'user', taskId],
      [2, 'assistant', taskId],
    ]);
    return counts;
  }

  it('handed over at SHUTDOWN_HANDOVER_MS: another replica resumes it at once', async () => {
    const counts = await stoppedWithoutRetry('tenant-p1', 4000);
    expect(counts).toMatchObject({
      firstAnswer: { status: 503, code: 'UNAVAILABLE' },
      killed: false,
      handedOver: 1,
      researchExecutions: 1,
      laborExecutions: 1,
      executionRecords: 2,
      replies: 1,
      storedMessages: 2,
    });
    expect([...counts.recoveredBy].sort()).toEqual([0, 1]);
  });

  it('killed before the hand-over: another replica resumes it when its capped lease ends', async () => {
    const counts = await stoppedWithoutRetry('tenant-p2', 300);
    expect(counts).toMatchObject({
      killed: true,
      handedOver: 0,
      researchExecutions: 1,
      laborExecutions: 1,
      executionRecords: 2,
      replies: 1,
      storedMessages: 2,
    });
    expect([...counts.recoveredBy].sort()).toEqual([0, 1]);
  });
});
