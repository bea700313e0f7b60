import { client, RunningSystem, startSystem } from './system';
import { debugLogs, logLines, runIndexSize, storedMessages, waitFor } from './faults.support';

/**
 * The orchestrator is killed (-9) while the specialist works; the specialist finishes and stores
 * its result (its agent session), then its only instance stops too. The recovered task must
 * complete with that stored result: the work is done, and nothing needs the agent again. Asked
 * again instead, the request waits AGENT_TIMEOUT_MS, the task fails 503 TIMEOUT (its agent
 * sessions deleted), and the client's retry runs the specialist's work a second time once it is
 * back, under a new agentSessionId.
 */
describe('system: recovery of a task whose specialist finished, then stopped', () => {
  let sys: RunningSystem;

  beforeAll(async () => {
    sys = await startSystem({
      env: { TASK_LEASE_MS: '3000', RECOVERY_INTERVAL_MS: '500', AGENT_TIMEOUT_MS: '5000' },
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: '1500' } },
    });
  });
  afterAll(() => sys?.stop());

  it('completes the task with the stored result, running the specialist once', async () => {
    const alice = client(sys.base, sys.token('tenant-g', 'alice'));
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const content = '我跟公司签的劳动合同有问题';
    const first = alice('POST', `/v1/conversations/${conversationId}/messages`, { content });
    first.catch(() => undefined); // its orchestrator dies: the socket closes
    const taskId: string = await waitFor(
      async () => (await alice('GET', `/v1/conversations/${conversationId}`)).body.activeTaskIds[0],
      { what: 'the task to start', intervalMs: 20, timeoutMs: 10_000 },
    );
    await waitFor(() => logLines(sys, 'labor-law-agent', 'executing', { taskId }).length === 1, {
      what: 'the specialist at work',
      intervalMs: 10,
      timeoutMs: 10_000,
    });
    await sys.kill(sys.processes('orchestrator')[0], 'SIGKILL');
    // The specialist stores its result, then its only instance stops.
    await waitFor(() => logLines(sys, 'labor-law-agent', 'executed').length >= 1, {
      what: 'the specialist to store its result',
      intervalMs: 20,
      timeoutMs: 10_000,
    });
    await sys.kill(sys.processes('labor-law-agent')[0], 'SIGTERM');

    sys.start('orchestrator');
    const ended = await waitFor(
      async () => {
        const t = await alice('GET', `/v1/tasks/${taskId}`).catch(() => null);
        return t?.body?.status && t.body.status !== 'RUNNING' ? t.body : null;
      },
      { what: 'the recovered task to end', intervalMs: 100, timeoutMs: 30_000 },
    );
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const counts = {
      status: ended.status,
      executions: ended.executions.map((e: any) => [e.agentType, e.status, e.error?.code]),
      laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
      stored: stored.map((m) => [m.seq, m.role, m.agentType]),
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    console.log(`recovery after the specialist stopped: ${JSON.stringify(counts)}`);
    debugLogs(sys);

    expect(counts).toEqual({
      status: 'COMPLETED',
      executions: [
        ['legal-research', 'COMPLETED', undefined],
        ['labor-law', 'COMPLETED', undefined],
      ],
      laborExecutions: 1,
      stored: [
        [1, 'user', null],
        [2, 'assistant', 'labor-law'],
      ],
      runIndex: 0,
    });
  });
});
