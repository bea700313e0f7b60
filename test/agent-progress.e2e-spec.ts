import { client, RunningSystem, startSystem } from './system';
import { debugLogs, logLines, storedMessages, waitFor } from './faults.support';
const { freePort } = require('../scripts/lib/processes');

const SILENCE_MS = 1500;
/** The labor-law agent's model answers after this long: well past the silence bound. */
const MODEL_MS = 4500;

/**
 * AGENT_TIMEOUT_MS bounds a wait without a sign of life, not a whole execution: an agent that
 * works past it while its process reports progress is waited for (up to AGENT_MAX_EXECUTION_MS),
 * one that falls silent is not.
 */
describe('system: an agent that works longer than AGENT_TIMEOUT_MS', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;

  const question = '我跟公司签的劳动合同有问题';
  const taskOf = async (api: typeof alice, conversationId: string) => {
    const [user] = await storedMessages(sys.env.MYSQL_URL, conversationId);
    return (await api('GET', `/v1/tasks/${user.taskId}`)).body;
  };
  const laborExecution = (task: { executions: Array<{ agentType: string }> }) =>
    task.executions.find((e) => e.agentType === 'labor-law');

  beforeAll(async () => {
    sys = await startSystem({
      env: { AGENT_TIMEOUT_MS: String(SILENCE_MS), AGENT_MAX_EXECUTION_MS: '60000' },
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: String(MODEL_MS) } },
    });
    alice = client(sys.base, sys.token('tenant-p', 'alice'));
  });
  afterAll(async () => {
    debugLogs(sys);
    await sys?.stop();
  });

  it('answers 201 while the agent reports progress', async () => {
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;

    const res = await alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: question,
    });

    expect(res.status).toBe(201);
    expect(res.body.reply.agentType).toBe('labor-law');
    const task = await taskOf(alice, conversationId);
    expect(task.status).toBe('COMPLETED');
    expect(laborExecution(task)).toMatchObject({ status: 'COMPLETED', attempts: 1 });
    const runs = logLines(sys, 'labor-law-agent', 'executing', { conversationId });
    expect(runs).toHaveLength(1); // waited for, not run again
  });

  it('stops waiting at AGENT_MAX_EXECUTION_MS, progress or not', async () => {
    // A second orchestrator whose limit on a whole execution is shorter than the model's answer.
    const port = await freePort();
    const strict = sys.start('orchestrator', {
      PORT: String(port),
      AGENT_MAX_EXECUTION_MS: String(MODEL_MS - 1500),
    });
    const api = client(`http://127.0.0.1:${port}`, sys.token('tenant-p', 'alice'));
    await waitFor(async () => (await api('GET', '/health')).status === 200, {
      what: 'the second orchestrator',
    });
    const conversationId = (await api('POST', '/v1/conversations', {})).body.conversationId;

    const res = await api('POST', `/v1/conversations/${conversationId}/messages`, {
      content: question,
    });

    expect(res.status).toBe(503);
    expect(res.body.code).toBe('TIMEOUT');
    const task = await taskOf(api, conversationId);
    expect(task.status).toBe('FAILED');
    expect(laborExecution(task)).toMatchObject({
      status: 'FAILED',
      error: { code: 'TIMEOUT', message: expect.stringContaining('AGENT_MAX_EXECUTION_MS') },
    });
    await sys.kill(strict, 'SIGTERM');
  });

  it('fails with TIMEOUT (503) once a working agent falls silent (its process frozen)', async () => {
    const [agent] = sys.processes('labor-law-agent');
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const turn = alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: question,
    });
    await waitFor(
      () => logLines(sys, 'labor-law-agent', 'executing', { conversationId }).length > 0,
      { what: 'the labor-law agent to start', intervalMs: 20 },
    );
    process.kill(agent.pid!, 'SIGSTOP');
    try {
      const res = await turn;

      expect(res.status).toBe(503);
      expect(res.body.code).toBe('TIMEOUT');
      const task = await taskOf(alice, conversationId);
      expect(laborExecution(task)).toMatchObject({
        status: 'FAILED',
        error: { code: 'TIMEOUT', message: 'labor-law did not answer in time' },
      });
    } finally {
      process.kill(agent.pid!, 'SIGCONT');
    }
  });
});
