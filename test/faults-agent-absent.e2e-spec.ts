import { client, RunningSystem, startSystem } from './system';
import {
  debugLogs,
  logLines,
  stopLaborLawAfterAnAnswer,
  storedMessages,
  waitFor,
} from './faults.support';
const { freePort } = require('../scripts/lib/processes');

const SHORT_TIMEOUT_MS = 2500;

/**
 * No instance of the specialist runs. The orchestrator still plans it (every agent type seen in
 * the last week is in the catalog) and its request waits in the stream: an instance that starts
 * within AGENT_TIMEOUT_MS answers it and the turn completes; otherwise the task fails with a
 * typed TIMEOUT (503), and the stale request is never run when the agent comes back.
 */
describe('system: an agent type with no live instance', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;
  let failedTaskId: string;
  let failed: { conversationId: string; followUpTaskId: string };
  const FIRST = '公司拖欠工资，劳动合同怎么处理';
  const FOLLOW_UP = '上面那份合同里关于竞业协议的部分怎么看?';

  beforeAll(async () => {
    sys = await startSystem({ env: { AGENT_TIMEOUT_MS: '30000' } });
    alice = client(sys.base, sys.token('tenant-n', 'alice'));
    await stopLaborLawAfterAnAnswer(sys, alice);
  });
  afterAll(() => sys?.stop());

  it('fails clearly with TIMEOUT (503) when none starts in time', async () => {
    // A second orchestrator with a short agent time-out; it never saw labor-law itself.
    const port = await freePort();
    const second = sys.start('orchestrator', {
      PORT: String(port),
      AGENT_TIMEOUT_MS: String(SHORT_TIMEOUT_MS),
    });
    const impatient = client(`http://127.0.0.1:${port}`, sys.token('tenant-n', 'alice'));
    await waitFor(async () => (await impatient('GET', '/health')).status === 200, {
      what: 'the second orchestrator',
    });
    const conversationId = (await impatient('POST', '/v1/conversations', {})).body.conversationId;
    const started = Date.now();
    const res = await impatient(
      'POST',
      `/v1/conversations/${conversationId}/messages`,
      { content: FIRST },
      { 'Idempotency-Key': 'k-first' },
    );
    const elapsedMs = Date.now() - started;
    const [user] = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const task = (await impatient('GET', `/v1/tasks/${user.taskId}`)).body;
    const view = (await impatient('GET', `/v1/conversations/${conversationId}`)).body;
    console.log(
      `no live agent, short time-out: ${JSON.stringify({ status: res.status, code: res.body.code, elapsedMs, task: task.status })}`,
    );
    expect(res.status).toBe(503);
    expect(res.body.code).toBe('TIMEOUT');
    expect(elapsedMs).toBeLessThan(SHORT_TIMEOUT_MS + 3000);
    expect(task.status).toBe('FAILED');
    expect(task.executions).toMatchObject([
      { agentType: 'legal-research', status: 'COMPLETED' },
      { agentType: 'labor-law', status: 'FAILED', error: { code: 'TIMEOUT' } },
    ]);
    expect(view.activeTaskIds).toEqual([]);
    expect(await storedMessages(sys.env.MYSQL_URL, conversationId)).toHaveLength(1);
    expect(view.messageCount).toBe(1); // the failed turn's user message is counted
    // The topic stays what the user asked about, answered or not: the seed's follow-up about
    // "that contract" is planned for labor-law again, not handed to contract-law.
    expect(view.currentIntent).toBe('labor-law');
    const followUp = await impatient(
      'POST',
      `/v1/conversations/${conversationId}/messages`,
      { content: FOLLOW_UP },
      { 'Idempotency-Key': 'k-follow-up' },
    );
    expect(followUp.status).toBe(503);
    const [, followUpMessage] = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const followUpTask = (await impatient('GET', `/v1/tasks/${followUpMessage.taskId}`)).body;
    expect(followUpTask.plan.at(-1)).toMatchObject({ agentType: 'labor-law', required: true });
    failedTaskId = user.taskId!;
    failed = { conversationId, followUpTaskId: followUpMessage.taskId! };
    await sys.kill(second, 'SIGTERM');
  });

  it('completes the turn when an instance starts within the time-out', async () => {
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const started = Date.now();
    const turn = alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    await waitFor(
      () => logLines(sys, 'orchestrator', 'plan labor-law', { conversationId }).length,
      {
        what: 'the turn to be planned',
        intervalMs: 20,
      },
    );
    sys.start('labor-law-agent');
    const res = await turn;
    const elapsedMs = Date.now() - started;
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const counts = {
      status: res.status,
      elapsedMs,
      laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { conversationId }).length,
      staleRequestRuns: logLines(sys, 'labor-law-agent', 'executing', { taskId: failedTaskId })
        .length,
      storedMessages: stored.length,
    };
    console.log(`no live agent, then one starts: ${JSON.stringify(counts)}`);
    debugLogs(sys);
    expect(res.body).toMatchObject({
      userMessage: { seq: 1 },
      reply: { seq: 2, agentType: 'labor-law' },
    });
    expect(counts).toMatchObject({
      status: 201,
      laborExecutions: 1,
      staleRequestRuns: 0,
      storedMessages: 2,
    });
  });

  it('answers the same-key retry of a TIMEOUT once the agent is back, from its checkpoint', async () => {
    // Runs after the agent came back (above). The first turn's key: the follow-up came after it.
    const { conversationId, followUpTaskId } = failed;
    const path = `/v1/conversations/${conversationId}/messages`;
    const first = await alice('POST', path, { content: FIRST }, { 'Idempotency-Key': 'k-first' });
    expect([first.status, first.body.code]).toEqual([409, 'CONFLICT']);
    const retry = await alice(
      'POST',
      path,
      { content: FOLLOW_UP },
      { 'Idempotency-Key': 'k-follow-up' },
    );
    const task = (await alice('GET', `/v1/tasks/${followUpTaskId}`)).body;
    const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const counts = {
      status: retry.status,
      researchRuns: logLines(sys, 'legal-research-agent', 'executing', { taskId: followUpTaskId })
        .length,
      laborRuns: logLines(sys, 'labor-law-agent', 'executing', { taskId: followUpTaskId }).length,
      firstTaskRuns: logLines(sys, 'labor-law-agent', 'executing', { taskId: failedTaskId }).length,
    };
    console.log(`same-key retry of a TIMEOUT: ${JSON.stringify(counts)}`);
    expect(counts).toEqual({ status: 201, researchRuns: 1, laborRuns: 1, firstTaskRuns: 0 });
    expect(retry.body).toMatchObject({
      taskId: followUpTaskId,
      userMessage: { seq: 2, content: FOLLOW_UP },
      reply: { seq: 3, agentType: 'labor-law' },
    });
    expect(stored.map((m) => [m.seq, m.role])).toEqual([
      [1, 'user'],
      [2, 'user'],
      [3, 'assistant'],
    ]);
    expect(task.status).toBe('COMPLETED');
    expect(task.executions.map((e: any) => [e.agentType, e.status, e.error?.code ?? null])).toEqual(
      [
        ['legal-research', 'COMPLETED', null],
        ['labor-law', 'FAILED', 'TIMEOUT'],
        ['labor-law', 'COMPLETED', null],
      ],
    );
    const view = (await alice('GET', `/v1/conversations/${conversationId}`)).body;
    expect(view).toMatchObject({ activeTaskIds: [], messageCount: 3 });
  });
});
