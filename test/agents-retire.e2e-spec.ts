import { execFile } from 'child_process';
import { rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { promisify } from 'util';
import Redis from 'ioredis';
import { agentExecutePattern, requestStreamKey } from '@loom/agent-kit';
import { createSessionInfra, SystemRepository, SystemSessions } from '@loom/session';
import { client, RunningSystem, startSystem } from './system';
import { stopLaborLawAfterAnAnswer, waitFor } from './faults.support';

const run = promisify(execFile);

/**
 * `npm run agents:retire` on an agent type whose last instance was stopped: the turn waiting for
 * it in its request stream fails at once with the retirement as its error (instead of 503
 * TIMEOUT after AGENT_TIMEOUT_MS), and the stream is deleted, not kept with its requests forever.
 */
describe('system: retiring an agent type', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;
  let redis: Redis;

  beforeAll(async () => {
    sys = await startSystem({ env: { AGENT_TIMEOUT_MS: '30000' } });
    redis = new Redis(sys.env.REDIS_URL);
    alice = client(sys.base, sys.token('tenant-r', 'alice'));
    await stopLaborLawAfterAnAnswer(sys, alice);
  });
  afterAll(async () => {
    redis?.disconnect();
    await sys?.stop();
  });

  it('fails the turn waiting for it with the retirement and deletes its request stream', async () => {
    const key = requestStreamKey(sys.env.LOOM_KEY_PREFIX, agentExecutePattern('labor-law'));
    const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const turn = alice('POST', `/v1/conversations/${conversationId}/messages`, {
      content: '公司拖欠工资，劳动合同怎么处理',
    });
    await waitFor(async () => (await redis.xlen(key)) > 0, { what: 'the queued request' });

    const cli = await run(
      process.execPath,
      ['dist/apps/orchestrator/src/cli/retire-agent.js', 'labor-law'],
      { env: { ...process.env, ...sys.env } },
    );
    const res = await turn;
    console.log(`agents:retire: ${cli.stdout.trim()} / turn: ${JSON.stringify(res.body)}`);
    expect(cli.stdout).toContain('labor-law: 1 queued requests failed');
    expect(cli.stdout).toContain('its request stream and registry keys deleted');
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ code: 'AGENT_FAILED' });
    expect(res.body.message).toContain('labor-law was retired');
    expect(await redis.exists(key)).toBe(0);
    // Every stream of the type goes, its health pattern's (with its consumer group) too.
    expect(await redis.keys(`${sys.env.LOOM_KEY_PREFIX}rpc:{agent.labor-law.*`)).toEqual([]);
    const registry = `${sys.env.LOOM_KEY_PREFIX}agents:{registry}`;
    expect(await redis.hexists(registry, 'labor-law')).toBe(0);
    // But its departures, expiring by themselves: a late beat of the stopped instance lists nothing.
    expect(await redis.keys(`${registry}:labor-law*`)).toEqual(
      (await redis.exists(`${registry}:labor-law:left`)) ? [`${registry}:labor-law:left`] : [],
    );
    expect(await redis.pttl(`${registry}:labor-law:left`)).not.toBe(-1);
  });

  // Any type an agent may register with (AGENT_TYPE_PATTERN: 2 to 64 of a-z, 0-9 and '-') can be
  // retired; the command used to answer its usage for one starting with a digit or of 64.
  it('takes every agent type an agent may register with', async () => {
    for (const type of ['3d-printing', 'x'.repeat(64)]) {
      const cli = await run(
        process.execPath,
        ['dist/apps/orchestrator/src/cli/retire-agent.js', '--force', type],
        { env: { ...process.env, ...sys.env } },
      );
      expect(cli.stdout).toContain(`retired ${type}`);
    }
  });

  // Orchestrators compare a retirement with their last sighting of the type, both on the
  // deployment's clock (Redis TIME): the command is often run from another machine, and one
  // whose clock ran minutes behind stamped the retirement before the last sighting, so the
  // retired type went on being planned (each of its steps waiting AGENT_TIMEOUT_MS).
  it("stamps the retirement on Redis's clock, not on a skewed host's", async () => {
    const skew = join(tmpdir(), `loom-retire-skew-${process.pid}.js`);
    writeFileSync(skew, 'const real = Date.now;\nDate.now = () => real() - 10 * 60_000;\n');
    try {
      const cli = await run(
        process.execPath,
        ['dist/apps/orchestrator/src/cli/retire-agent.js', '--force', 'skewed-clock'],
        { env: { ...process.env, ...sys.env, NODE_OPTIONS: `--require ${skew}` } },
      );
      expect(cli.stdout).toContain('retired skewed-clock');
    } finally {
      rmSync(skew, { force: true });
    }
    const infra = await createSessionInfra({
      mysqlUrl: sys.env.MYSQL_URL,
      redisUrl: sys.env.REDIS_URL,
      keyPrefix: sys.env.LOOM_KEY_PREFIX,
    });
    try {
      const retired = await new SystemRepository(infra.store).value<Record<string, number>>(
        SystemSessions.catalog,
        'retired',
      );
      const [seconds] = await redis.time();
      const offBy = Math.abs((retired?.['skewed-clock'] ?? 0) - Number(seconds) * 1000);
      expect({ withinAMinute: offBy < 60_000 }).toEqual({ withinAMinute: true });
    } finally {
      await infra.close();
    }
  });
});
