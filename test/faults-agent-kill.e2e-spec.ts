import { client, RunningSystem, startSystem } from './system';
import { contiguous, debugLogs, logLines, storedMessages, waitFor } from './faults.support';

/**
 * The specialist is killed (-9) in the middle of its model call and started again. Its request
 * stays pending in the stream, the new instance reclaims it once it has been idle for the
 * transport's claim time (AGENT_CLAIM_IDLE_MS, 3 s here instead of the default 30 s, so the test
 * waits less) and runs it under the same agentSessionId once the dead instance's execution claim
 * (15 s, no longer renewed) has expired; the turn the user is waiting for completes once.
 */
describe('system: an agent killed mid-task', () => {
  let sys: RunningSystem;

  beforeAll(async () => {
    sys = await startSystem({
      env: { AGENT_TIMEOUT_MS: '90000', AGENT_CLAIM_IDLE_MS: '3000' },
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: '1500' } },
    });
  });
  afterAll(() => sys?.stop());

  it('completes the turn once after the agent is restarted', async () => {
    const alice = client(sys.base, sys.token('tenant-k', 'alice'));
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const started = Date.now();
    const turn = alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    const [working] = await waitFor(
      () => {
        const lines = logLines(sys, 'labor-law-agent', 'executing', { conversationId });
        return lines.length ? lines : null;
      },
      { what: 'the specialist at work', intervalMs: 10, timeoutMs: 15_000 },
    );
    await sys.kill(sys.processes('labor-law-agent')[0], 'SIGKILL');
    const killedAt = Date.now();
    sys.start('labor-law-agent');

    const res = await turn;
    const completedAfterKillMs = Date.now() - killedAt;
    const taskId = working.taskId as string;
    expect(res.status).toBe(201);
    const task = (await alice('GET', `/v1/tasks/${taskId}`)).body;
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const laborRecords = task.executions.filter((e: any) => e.agentType === 'labor-law');
    const counts = {
      turnMs: Date.now() - started,
      completedAfterKillMs,
      laborDeliveriesRun: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
      laborRecords: laborRecords.length,
      storedMessages: stored.length,
      assistantRowsForTask: stored.filter((m) => m.role === 'assistant' && m.taskId === taskId)
        .length,
    };
    console.log(`agent killed mid-task: ${JSON.stringify(counts)}`);
    debugLogs(sys);

    expect(res.body).toMatchObject({
      taskId,
      userMessage: { seq: 1 },
      reply: { seq: 2, agentType: 'labor-law', taskId },
    });
    expect(counts).toMatchObject({
      laborDeliveriesRun: 2, // the killed one and the reclaimed one; only the second finished
      laborRecords: 1,
      storedMessages: 2,
      assistantRowsForTask: 1,
    });
    expect(laborRecords[0]).toMatchObject({ status: 'COMPLETED', attempts: 1 });
    expect(task.status).toBe('COMPLETED');
    expect(contiguous(stored)).toBe(true);
    const view = (await alice('GET', `/v1/conversations/${conversationId}`)).body;
    expect(view).toMatchObject({ messageCount: 2, activeTaskIds: [] });
  });
});
