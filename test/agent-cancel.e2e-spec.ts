import Redis from 'ioredis';
import { TEST_REDIS_URL } from '@loom/testing';
import { client, RunningSystem, startSystem } from './system';
import { debugLogs, logLines, storedMessages, waitFor } from './faults.support';
const { freePort } = require('../scripts/lib/processes');

const SILENCE_MS = 1500;
const LIMIT_MS = 3000;
/** The claim's renewal period (a third of its 15 s TTL), and a margin. */
const RENEWAL_MS = 5000 + 500;

/**
 * A labor-law model that never answers (the offline model's longest delay, 10 min) under a
 * small AGENT_MAX_EXECUTION_MS: the agent cancels the execution instead of holding it, its
 * slot and its claim for good.
 */
describe('system: an agent execution past AGENT_MAX_EXECUTION_MS is cancelled', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;
  let redis: Redis;

  const laborQuestion = '我跟公司签的劳动合同有问题';
  const leaseQuestion = '我租房的租赁合同到期了，房东不退押金怎么办';
  const laborExecution = async (api: typeof alice, conversationId: string) => {
    const [user] = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const task = (await api('GET', `/v1/tasks/${user.taskId}`)).body;
    return task.executions.find((e: { agentType: string }) => e.agentType === 'labor-law');
  };
  const claimKey = (conversationId: string, agentSessionId: string) =>
    `${sys.env.LOOM_KEY_PREFIX}s:{${conversationId}}:claim:${agentSessionId}`;
  const cancelled = (conversationId: string) =>
    logLines(sys, 'labor-law-agent', 'execution cancelled', { conversationId });
  const requestStream = () => `${sys.env.LOOM_KEY_PREFIX}rpc:{agent.labor-law.execute}`;

  beforeAll(async () => {
    sys = await startSystem({
      env: { AGENT_TIMEOUT_MS: String(SILENCE_MS), AGENT_MAX_EXECUTION_MS: String(LIMIT_MS) },
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: '600000' } },
    });
    alice = client(sys.base, sys.token('tenant-c', 'alice'));
    redis = new Redis(TEST_REDIS_URL);
  });
  afterAll(async () => {
    debugLogs(sys);
    redis?.disconnect();
    await sys?.stop();
  });

  it('fails the execution with TIMEOUT, stops renewing its claim, and the next turn works', async () => {
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;

    const res = await alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: laborQuestion,
    });

    expect(res.status).toBe(503);
    expect(res.body).toEqual({
      statusCode: 503,
      code: 'TIMEOUT',
      message:
        'required agent labor-law failed: labor-law was still working at the execution limit (AGENT_MAX_EXECUTION_MS)',
    });
    const execution = await laborExecution(alice, conversationId);
    expect(execution).toMatchObject({ status: 'FAILED', error: { code: 'TIMEOUT' } });
    // The agent cancelled its execution: the model call ended, the failure is typed.
    await waitFor(() => cancelled(conversationId).length > 0, { what: 'the cancellation' });
    // By the request's deadline (set when it was sent) or by the agent's own timer (started when
    // the execution did, a moment later): on a loaded machine either may fire first.
    const lines = cancelled(conversationId);
    expect(lines).toEqual([expect.objectContaining({ code: 'TIMEOUT' })]);
    expect([
      "the request's deadline (AGENT_MAX_EXECUTION_MS) passed and the execution was cancelled",
      `the execution ran past AGENT_MAX_EXECUTION_MS (${LIMIT_MS} ms) and was cancelled`,
    ]).toContain(lines[0].reason);
    // Its claim was let go (it was taken: its last taker is recorded) and is not renewed.
    const key = claimKey(conversationId, execution.agentSessionId);
    await waitFor(async () => (await redis.exists(key)) === 0, { what: 'the claim released' });
    expect(await redis.exists(`${key}:last`)).toBe(1);
    await new Promise((r) => setTimeout(r, RENEWAL_MS));
    expect(await redis.pttl(key)).toBe(-2);
    // Answered and acked: nothing pending that another instance would run again.
    expect(await redis.xlen(requestStream())).toBe(0);
    expect(((await redis.xpending(requestStream(), 'workers')) as unknown[])[0]).toBe(0);

    const next = await alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: leaseQuestion,
    });

    expect(next.status).toBe(201);
    expect(next.body.reply.agentType).toBe('contract-law');
    expect(next.body.userMessage.seq).toBe(2);
  });

  it('answers the typed error at once to an orchestrator that would wait longer than the agent', async () => {
    // An orchestrator whose limit is far longer than the agent's: the agent's answer ends the wait.
    const port = await freePort();
    const patient = sys.start('orchestrator', {
      PORT: String(port),
      AGENT_MAX_EXECUTION_MS: '600000',
    });
    const api = client(`http://127.0.0.1:${port}`, sys.token('tenant-c', 'alice'));
    await waitFor(async () => (await api('GET', '/health')).status === 200, {
      what: 'the second orchestrator',
    });
    const conversationId = (await api('POST', '/v1/conversations', {})).body.conversationId;

    const res = await api('POST', `/v1/conversations/${conversationId}/messages`, {
      content: laborQuestion,
    });

    expect(res.status).toBe(503);
    expect(res.body.code).toBe('TIMEOUT');
    expect(res.body.message).toBe(
      'required agent labor-law failed: labor-law was still working at the execution limit (AGENT_MAX_EXECUTION_MS)',
    );
    expect(cancelled(conversationId)).toEqual([
      expect.objectContaining({
        code: 'TIMEOUT',
        reason: `the execution ran past AGENT_MAX_EXECUTION_MS (${LIMIT_MS} ms) and was cancelled`,
      }),
    ]);
    await sys.kill(patient, 'SIGTERM');
  });
});

/**
 * An agent stopped (SIGTERM) while its model hangs: past its drain it cancels the execution,
 * lets go of its claim and answers nothing, so another instance takes the request over at once
 * and the turn is answered.
 */
describe('system: an agent stopping past its drain cancels what still runs', () => {
  let sys: RunningSystem;
  let redis: Redis;

  beforeAll(async () => {
    sys = await startSystem({
      // A drain of 1 s; a turn that waits out the hand-over to another instance.
      env: { AGENT_CLAIM_IDLE_MS: '2000', AGENT_TIMEOUT_MS: '30000' },
      appEnv: { 'labor-law-agent': { LLM_OFFLINE_DELAY_MS: '600000' } },
    });
    redis = new Redis(TEST_REDIS_URL);
  });
  afterAll(async () => {
    debugLogs(sys);
    redis?.disconnect();
    await sys?.stop();
  });

  it('records it failed (UNAVAILABLE), releases its claim and leaves the request to another instance', async () => {
    const alice = client(sys.base, sys.token('tenant-s', 'alice'));
    const [stopping] = sys.processes('labor-law-agent');
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const turn = alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    await waitFor(
      () => logLines(sys, 'labor-law-agent', 'executing', { conversationId }).length > 0,
      { what: 'the labor-law agent to start', intervalMs: 20 },
    );
    const [user] = await storedMessages(sys.env.MYSQL_URL, conversationId);
    const task = (await alice('GET', `/v1/tasks/${user.taskId}`)).body;
    const { agentSessionId } = task.executions.find(
      (e: { agentType: string }) => e.agentType === 'labor-law',
    );
    const key = `${sys.env.LOOM_KEY_PREFIX}s:{${conversationId}}:claim:${agentSessionId}`;
    expect(await redis.exists(key)).toBe(1);

    await sys.kill(stopping, 'SIGTERM');

    expect(logLines(sys, 'labor-law-agent', 'execution cancelled', { conversationId })).toEqual([
      expect.objectContaining({
        code: 'UNAVAILABLE',
        reason: 'the agent stopped before the execution finished, and cancelled it',
      }),
    ]);
    expect(await redis.exists(key)).toBe(0); // let go before it exited, not left to its TTL
    const stream = `${sys.env.LOOM_KEY_PREFIX}rpc:{agent.labor-law.execute}`;
    expect(((await redis.xpending(stream, 'workers')) as unknown[])[0]).toBe(1);

    sys.start('labor-law-agent', { LLM_OFFLINE_DELAY_MS: '0' });
    const res = await turn;

    expect(res.status).toBe(201);
    expect(res.body.reply.agentType).toBe('labor-law');
    const done = (await alice('GET', `/v1/tasks/${user.taskId}`)).body;
    expect(done.status).toBe('COMPLETED');
  });
});
