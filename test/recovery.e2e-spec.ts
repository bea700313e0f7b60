import { client, RunningSystem, startSystem } from './system';
const { freePort } = require('../scripts/lib/processes');
import {
  contiguous,
  debugLogs,
  logLines,
  runIndexSize,
  storedMessages,
  waitFor,
} from './faults.support';

const LEASE_MS = 3000;
const INTERVAL_MS = 500;

/**
 * The orchestrator is killed (-9) between two agents: research has completed and is
 * checkpointed, the specialist has its request (checkpointed RUNNING) and is still working. Started again, it finds the task through the
 * run index once its lease expires, takes the dead worker's conversation lock and resumes from
 * the checkpoint: research is not run again, the specialist's finished work is returned from
 * its store, the reply is appended once.
 */
describe('system: recovery of a task whose orchestrator died between two agents', () => {
  let sys: RunningSystem;

  beforeAll(async () => {
    sys = await startSystem({
      env: { TASK_LEASE_MS: String(LEASE_MS), RECOVERY_INTERVAL_MS: String(INTERVAL_MS) },
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: '1500' } },
    });
  });
  afterAll(() => sys?.stop());

  /**
   * A turn whose orchestrator is killed (-9) while research is checkpointed COMPLETED and the
   * specialist works on its request; its POST fails with the closed socket.
   */
  async function interruptedTurn(tenant: string, idempotencyKey: string) {
    const alice = client(sys.base, sys.token(tenant, 'alice'));
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const key = { 'idempotency-key': idempotencyKey };
    const content = '我跟公司签的劳动合同有问题';
    const first = alice('POST', `/v1/conversations/${conversationId}/messages`, { content }, key);
    first.catch(() => undefined); // its orchestrator dies: the socket closes

    // Wait until research is checkpointed COMPLETED while the specialist still works, then kill.
    const taskId: string = await waitFor(
      async () => (await alice('GET', `/v1/conversations/${conversationId}`)).body.activeTaskIds[0],
      { what: 'the task to start', intervalMs: 20, timeoutMs: 10_000 },
    );
    const checkpoint = await waitFor(
      async () => {
        const t = (await alice('GET', `/v1/tasks/${taskId}`)).body;
        const research = t.executions.find((e: any) => e.agentType === 'legal-research');
        return research?.status === 'COMPLETED' ? t : null;
      },
      { what: 'research checkpointed', intervalMs: 20, timeoutMs: 10_000 },
    );
    expect(checkpoint.status).toBe('RUNNING');
    // The specialist has its request and works on it (1.5 s) when its orchestrator dies.
    await waitFor(() => logLines(sys, 'labor-law-agent', 'executing', { taskId }).length === 1, {
      what: 'the specialist at work',
      intervalMs: 10,
      timeoutMs: 10_000,
    });
    const inFlight = (await alice('GET', `/v1/tasks/${taskId}`)).body.executions;
    expect(inFlight.map((e: any) => [e.agentType, e.status])).toEqual([
      ['legal-research', 'COMPLETED'],
      ['labor-law', 'RUNNING'],
    ]);
    await sys.kill(sys.processes('orchestrator')[0], 'SIGKILL');
    await expect(first).rejects.toBeTruthy();
    return { alice, conversationId, taskId, key, content };
  }

  /** The task once COMPLETED, and the reply rows stored for it. */
  async function recoveredTask(
    alice: ReturnType<typeof client>,
    conversationId: string,
    taskId: string,
  ) {
    const done = await waitFor(
      async () => {
        const t = await alice('GET', `/v1/tasks/${taskId}`).catch(() => null);
        return t?.body?.status === 'COMPLETED' ? t.body : null;
      },
      { what: 'the recovered task', intervalMs: 50, timeoutMs: 30_000 },
    );
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    return { done, stored };
  }

  it('resumes from the checkpoint within lease + interval + 2 s and completes once', async () => {
    const { alice, conversationId, taskId, key, content } = await interruptedTurn(
      'tenant-r',
      'recovery-1',
    );

    const restartedAt = Date.now();
    sys.start('orchestrator');
    const { done } = await recoveredTask(alice, conversationId, taskId);
    const recoveryMs = Date.now() - restartedAt;
    // The recoverer logs once the resume has returned, a moment after the task is COMPLETED.
    await waitFor(() => logLines(sys, 'orchestrator', `recovered ${taskId}`).length > 0, {
      what: 'the recoverer to report',
      intervalMs: 20,
      timeoutMs: 5_000,
    });

    const byType = (type: string) => done.executions.filter((e: any) => e.agentType === type);
    const researchRuns = logLines(sys, 'legal-research-agent', 'executing', { taskId });
    const laborRuns = logLines(sys, 'labor-law-agent', 'executing', { taskId });
    // Its finished work is taken as stored: read by the recoverer itself when the specialist had
    // finished (its agent session written), else returned by the specialist, redelivered.
    const laborReplays = [
      ...logLines(sys, 'labor-law-agent', 'redelivery', { taskId }),
      ...logLines(sys, 'orchestrator', 'labor-law had finished', { taskId }),
    ];
    const recovered = logLines(sys, 'orchestrator', `recovered ${taskId}`);
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const replies = stored.filter((m) => m.role === 'assistant' && m.taskId === taskId);
    const retry = await alice(
      'POST',
      `/v1/conversations/${conversationId}/messages`,
      { content },
      key,
    );
    const view = (await alice('GET', `/v1/conversations/${conversationId}`)).body;
    const counts = {
      recoveryMs,
      boundMs: LEASE_MS + INTERVAL_MS + 2000,
      researchExecutions: researchRuns.length,
      laborExecutions: laborRuns.length,
      laborReplays: laborReplays.length,
      recoveries: recovered.length,
      executionRecords: done.executions.length,
      storedMessages: stored.length,
      replies: replies.length,
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    console.log(`recovery after orchestrator kill: ${JSON.stringify(counts)}`);
    debugLogs(sys);

    expect(recoveryMs).toBeLessThanOrEqual(LEASE_MS + INTERVAL_MS + 2000);
    expect(counts).toMatchObject({
      researchExecutions: 1,
      laborExecutions: 1,
      laborReplays: 1,
      recoveries: 1,
      executionRecords: 2,
      storedMessages: 2,
      replies: 1,
      runIndex: 0,
    });
    expect(byType('legal-research')).toMatchObject([{ status: 'COMPLETED', attempts: 1 }]);
    expect(byType('labor-law')).toMatchObject([{ status: 'COMPLETED', attempts: 2 }]);
    expect(contiguous(stored)).toBe(true);
    expect(stored.map((m) => [m.seq, m.role, m.taskId])).toEqual([
      [1, 'user', taskId],
      [2, 'assistant', taskId],
    ]);
    expect(done.sharedContext['research.statutes'].writer).toBe('legal-research');
    // The retried POST gets the recovered turn, and adds nothing.
    expect(retry.status).toBe(201);
    expect(retry.body).toMatchObject({
      taskId,
      agents: ['legal-research', 'labor-law'],
      userMessage: { seq: 1, content },
      reply: { seq: 2, agentType: 'labor-law', taskId },
    });
    expect(view).toMatchObject({ messageCount: 2, activeTaskIds: [], currentIntent: 'labor-law' });
    expect((await storedMessages(sys.env.MYSQL_URL, conversationId)).length).toBe(2);
  });

  it('is recovered by exactly one of two orchestrator replicas that start together', async () => {
    const { alice, conversationId, taskId } = await interruptedTurn('tenant-q', 'recovery-2');
    const before = logLines(sys, 'orchestrator', `recovered ${taskId}`).length;
    const port = await freePort();
    const replicas = [sys.start('orchestrator'), sys.start('orchestrator', { PORT: String(port) })];
    // Both are up (and so scanning) well before the 3 s lease has run out.
    for (const base of [sys.base, `http://127.0.0.1:${port}`])
      await waitFor(async () => (await fetch(`${base}/health`).catch(() => null))?.ok, {
        what: `the replica at ${base}`,
        intervalMs: 50,
        timeoutMs: 30_000,
      });
    const { done, stored } = await recoveredTask(alice, conversationId, taskId);
    // Both replicas scan every RECOVERY_INTERVAL_MS; give the loser several scans to misbehave.
    await new Promise((r) => setTimeout(r, LEASE_MS + 4 * INTERVAL_MS));
    const recovered = logLines(sys, 'orchestrator', `recovered ${taskId}`).slice(before);
    const byReplica = replicas.map(
      (r) => r.lines.filter((l) => l.includes(`recovered ${taskId}`)).length,
    );
    const counts = {
      recoveries: recovered.length,
      byReplica,
      researchExecutions: logLines(sys, 'legal-research-agent', 'executing', { taskId }).length,
      laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
      executionRecords: done.executions.length,
      replies: stored.filter((m) => m.role === 'assistant' && m.taskId === taskId).length,
      storedMessages: (await storedMessages(sys.env.MYSQL_URL, conversationId)).length,
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    console.log(`recovery by two replicas: ${JSON.stringify(counts)}`);
    expect(counts).toMatchObject({
      recoveries: 1,
      researchExecutions: 1,
      laborExecutions: 1,
      executionRecords: 2,
      replies: 1,
      storedMessages: 2,
      runIndex: 0,
    });
    expect([...byReplica].sort()).toEqual([0, 1]);
    expect(replicas.map((r) => r.exitCode)).toEqual([null, null]); // both ran throughout
    expect(contiguous(stored)).toBe(true);
  });
});
