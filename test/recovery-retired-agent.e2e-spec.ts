import { execFile } from 'child_process';
import { promisify } from 'util';
import Redis from 'ioredis';
import { agentExecutePattern, requestStreamKey } from '@loom/agent-kit';
import { client, RunningSystem, startSystem } from './system';
import { runIndexSize, stopLaborLawAfterAnAnswer, waitFor } from './faults.support';

const run = promisify(execFile);

/**
 * The orchestrator is killed (-9) while its task waits for a specialist that has no instance
 * left; the operator then retires that agent type (`npm run agents:retire`), which fails the
 * queued request and deletes its stream. The recovered task must end as the live turn would
 * have: AGENT_FAILED (502) with the retirement as its error, final for its Idempotency-Key,
 * rather than wait AGENT_TIMEOUT_MS for an agent that will never come back and fail with a
 * 503 TIMEOUT that invites the client to retry (each retry waiting and failing the same way),
 * its request re-creating the stream the command deleted.
 */
describe('system: recovery of a task whose required agent type was retired meanwhile', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;
  let redis: Redis;

  beforeAll(async () => {
    sys = await startSystem({
      env: { TASK_LEASE_MS: '3000', RECOVERY_INTERVAL_MS: '500', AGENT_TIMEOUT_MS: '8000' },
    });
    redis = new Redis(sys.env.REDIS_URL);
    alice = client(sys.base, sys.token('tenant-r', 'alice'));
    await stopLaborLawAfterAnAnswer(sys, alice);
  });
  afterAll(async () => {
    redis?.disconnect();
    await sys?.stop();
  });

  it('fails the task with the retirement (502, final), dispatching nothing to the retired type', async () => {
    const stream = requestStreamKey(sys.env.LOOM_KEY_PREFIX, agentExecutePattern('labor-law'));
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const key = { 'idempotency-key': 'retired-1' };
    const content = '公司拖欠工资，劳动合同怎么处理';
    const first = alice('POST', `/v1/conversations/${conversationId}/messages`, { content }, key);
    first.catch(() => undefined); // its orchestrator dies: the socket closes
    await waitFor(async () => (await redis.xlen(stream)) > 0, { what: 'the queued request' });
    const taskId: string = (await alice('GET', `/v1/conversations/${conversationId}`)).body
      .activeTaskIds[0];
    await sys.kill(sys.processes('orchestrator')[0], 'SIGKILL');

    const cli = await run(
      process.execPath,
      ['dist/apps/orchestrator/src/cli/retire-agent.js', 'labor-law'],
      { env: { ...process.env, ...sys.env } },
    );
    expect(cli.stdout).toContain('its request stream and registry keys deleted');

    sys.start('orchestrator');
    const ended = await waitFor(
      async () => {
        const t = await alice('GET', `/v1/tasks/${taskId}`).catch(() => null);
        return t?.body?.status && t.body.status !== 'RUNNING' ? t.body : null;
      },
      { what: 'the recovered task to end', intervalMs: 100, timeoutMs: 40_000 },
    );
    const retry = await alice(
      'POST',
      `/v1/conversations/${conversationId}/messages`,
      { content },
      key,
    );
    const labor = ended.executions.filter((e: any) => e.agentType === 'labor-law').at(-1);
    const counts = {
      status: ended.status,
      error: labor?.error,
      retry: [retry.status, retry.body.code],
      streamExists: await redis.exists(stream),
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    console.log(`recovery of a task of a retired agent: ${JSON.stringify(counts)}`);

    expect(ended.status).toBe('FAILED');
    expect(labor).toMatchObject({ status: 'FAILED', error: { code: 'AGENT_FAILED' } });
    expect(labor.error.message).toContain('labor-law was retired');
    expect(retry.status).toBe(502);
    expect(retry.body).toMatchObject({ code: 'AGENT_FAILED' });
    expect(retry.body.message).toContain('labor-law was retired');
    // Nothing was queued for the retired type again: its stream stays deleted.
    expect(await redis.exists(stream)).toBe(0);
    expect(await runIndexSize(sys.env.MYSQL_URL)).toBe(0);
  });
});
