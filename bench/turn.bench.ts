/**
 * A whole turn (POST /v1/conversations/:id/messages → orchestrator → legal-research → labor-law,
 * offline model at 0 ms) on the real system: the four apps as separate processes (dist/, built by
 * `npm run bench`) on a database of their own and a redis-server of their own. Sequential p50/p99
 * and throughput with 64 concurrent conversations, beside the stock Nest Redis echo and one MySQL
 * INSERT measured in the same run, then the targets of issues 3 and 4, and where a turn's time
 * goes: phases from the apps' own log timestamps, CPU ms of every process, MySQL statements and
 * Redis commands per turn. The database is dropped and the redis-server (every key) ends after.
 */
import { randomBytes } from 'crypto';
import { readFileSync } from 'fs';
import { createConnection } from 'mysql2/promise';
import Redis from 'ioredis';
import { appProcesses, AppChild, createTestDatabase, PrivateRedisServer } from '@loom/testing';
import { onInterrupt } from './interrupt';
import { openTransports, throughput as echoThroughput } from './dispatch.bench';
import { ms, sample, summarize, Summary, table } from './stats';

const SEQUENTIAL_CONVS = 30;
const TURNS_PER_CONV = 10;
const WARMUP_TURNS = 20;
const CONCURRENT_CONVS = 64;
const CONCURRENT_TURNS = 5;
const ECHO_SAMPLES = 1000;
const INSERT_SAMPLES = 500;
/** A conversation of ten turns, as in the fault tests: research, then labor-law (and contract-law). */
const SCRIPT = [
  '我跟公司签的劳动合同有问题',
  '上面那份合同里关于竞业协议的部分怎么看?',
  '那竞业限制最长多久?',
  'My employment contract with my company has a problem',
  'What about the non-compete clause in that contract?',
  '公司不给加班费怎么办',
  '试用期被辞退有补偿吗',
  'Can my employer change my salary without my consent?',
  '劳动合同到期不续签有补偿吗',
  'How much notice must my employer give me?',
];

export interface BenchSystem {
  base: string;
  token: string;
  children: AppChild[];
  redis: PrivateRedisServer;
  mysqlUrl: string;
  stop(): Promise<void>;
}

/** The four apps as processes, like test/system.ts, on their own database and redis-server. */
export async function startBenchSystem(env: Record<string, string> = {}): Promise<BenchSystem> {
  const p = appProcesses();
  const db = await createTestDatabase('loom_bench_turn');
  const stopDb = onInterrupt(() => db.drop());
  const redis = await PrivateRedisServer.start().catch(async (err: unknown) => {
    await stopDb();
    throw err;
  });
  const killRedis = onInterrupt(() => redis.kill()); // every key of the run goes with it
  const port = await p.freePort();
  const jwtSecret = randomBytes(24).toString('hex');
  const appEnv = {
    REDIS_URL: redis.url,
    MYSQL_URL: db.url,
    LOOM_KEY_PREFIX: 'loombench:',
    LOOM_JWT_SECRET: jwtSecret,
    LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
    PORT: String(port),
    LLM_PROVIDER: 'offline',
    LLM_OFFLINE_DELAY_MS: '0',
    // One tenant sends the whole load: the limiter stays in the path (one Redis call) but never bites.
    LOOM_RATE_LIMIT_PER_MINUTE: '1000000',
    // ...and one user: its shares of the turns in flight are the whole bound, past the 64 at once.
    LOOM_MAX_TURNS_PER_TENANT: '200',
    LOOM_MAX_TURNS_PER_USER: '200',
    ...env,
  };
  const children = p.APPS.map((app) => p.startApp(app, appEnv));
  const stopApps = onInterrupt(() => p.stopAll(children));
  const base = `http://127.0.0.1:${port}`;
  const token = p.signJwt({ sub: 'bench-user', tid: 'bench-tenant' }, jwtSecret);
  const sys: BenchSystem = {
    base,
    token,
    children,
    redis,
    mysqlUrl: db.url,
    stop: async () => {
      await stopApps();
      await killRedis();
      await stopDb();
    },
  };
  try {
    await p.waitFor(async () => (await fetch(`${base}/health`)).status === 200, {
      what: 'orchestrator health',
      timeoutMs: 60_000,
    });
    const agents = p.APPS.length - 1;
    await p.waitFor(
      async () => {
        const res = await fetch(`${base}/v1/agents`, {
          headers: { authorization: `Bearer ${token}` },
        });
        return res.ok && ((await res.json()) as { items: unknown[] }).items.length >= agents;
      },
      { what: `${agents} agents registered`, timeoutMs: 60_000 },
    );
  } catch (err) {
    await sys.stop();
    throw err;
  }
  return sys;
}

async function http(sys: BenchSystem, method: string, path: string, body?: unknown) {
  const res = await fetch(`${sys.base}${path}`, {
    method,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${sys.token}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as any;
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

const newConversation = async (sys: BenchSystem): Promise<string> =>
  (await http(sys, 'POST', '/v1/conversations', {})).conversationId;

interface TurnSample {
  ms: number;
  taskId: string;
  startedAt: number;
  endedAt: number;
}

async function turn(sys: BenchSystem, convId: string, content: string): Promise<TurnSample> {
  const startedAt = Date.now();
  const t0 = performance.now();
  const view = await http(sys, 'POST', `/v1/conversations/${convId}/messages`, { content });
  return { ms: performance.now() - t0, taskId: view.taskId, startedAt, endedAt: Date.now() };
}

/** Turns of `convs` conversations, one conversation's turns after another's (no overlap). */
async function sequentialTurns(sys: BenchSystem, convs: number): Promise<TurnSample[]> {
  const ids: string[] = [];
  for (let i = 0; i < convs; i++) ids.push(await newConversation(sys));
  const out: TurnSample[] = [];
  // Round-robin over the conversations, so every history length is sampled alike.
  for (let t = 0; t < TURNS_PER_CONV; t++)
    for (const id of ids) out.push(await turn(sys, id, SCRIPT[t]));
  return out;
}

/** Turns per second with `convs` conversations at once, each `turns` turns in a row. */
async function concurrentTurns(sys: BenchSystem, convs: number, turns: number): Promise<number> {
  const ids = await Promise.all(Array.from({ length: convs }, () => newConversation(sys)));
  const t0 = performance.now();
  await Promise.all(
    ids.map(async (id) => {
      for (let t = 0; t < turns; t++) await turn(sys, id, SCRIPT[t]);
    }),
  );
  return (convs * turns) / ((performance.now() - t0) / 1000);
}

/** One single-row INSERT (autocommit) into a scratch table of the bench's database. */
async function mysqlInsert(mysqlUrl: string): Promise<Summary> {
  const conn = await createConnection(mysqlUrl);
  try {
    await conn.query(
      'CREATE TABLE bench_scratch (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(64) NOT NULL, ' +
        'v TEXT NOT NULL) ENGINE=InnoDB',
    );
    let n = 0;
    const row = JSON.stringify({ role: 'user', content: 'x'.repeat(200) });
    return summarize(
      await sample(
        () => conn.execute('INSERT INTO bench_scratch (k, v) VALUES (?, ?)', [`k${++n}`, row]),
        {
          count: INSERT_SAMPLES,
          warmup: 50,
        },
      ),
    );
  } finally {
    await conn.query('DROP TABLE IF EXISTS bench_scratch').catch(() => undefined);
    await conn.end();
  }
}

/** MySQL statements (global Com_* counters) and Redis commands (INFO commandstats) so far. */
async function counters(sys: BenchSystem): Promise<Record<string, number>> {
  const conn = await createConnection(sys.mysqlUrl);
  const redis = new Redis(sys.redis.url);
  try {
    const out: Record<string, number> = {};
    const [rows] = await conn.query(
      "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select','Com_insert','Com_insert_select'," +
        "'Com_update','Com_delete','Com_commit','Com_begin','Questions')",
    );
    for (const r of rows as { Variable_name: string; Value: string }[])
      out[`mysql ${r.Variable_name.replace(/^Com_/, '').toLowerCase()}`] = Number(r.Value);
    const stats = await redis.info('commandstats');
    for (const m of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
      out[`redis ${m[1]}`] = Number(m[2]);
    return out;
  } finally {
    await conn.end();
    redis.disconnect();
  }
}

function prefixed(prefix: string, o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [prefix + k, v]));
}

function delta(before: Record<string, number>, after: Record<string, number>, turns: number) {
  return Object.keys(after)
    .map((k) => ({ k, per: (after[k] - (before[k] ?? 0)) / turns }))
    .filter((d) => d.per >= 0.05);
}

/** Processes whose CPU time is counted: the four apps, the redis-server and MySQL (Linux only). */
async function cpuPids(sys: BenchSystem): Promise<Record<string, number>> {
  const pids: Record<string, number> = {};
  for (const c of sys.children) if (c.pid) pids[c.app] = c.pid;
  const redis = new Redis(sys.redis.url);
  try {
    pids['redis-server'] = Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]);
  } finally {
    redis.disconnect();
  }
  const conn = await createConnection(sys.mysqlUrl);
  try {
    const [rows] = await conn.query('SELECT @@pid_file AS f');
    const file = (rows as { f: string }[])[0]?.f;
    const pid = Number(file && readProc(file)?.trim());
    if (pid) pids['mysqld (server-wide)'] = pid;
  } finally {
    await conn.end();
  }
  return pids;
}

function readProc(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

/** User + system CPU ms of each process so far (/proc/<pid>/stat, USER_HZ 100). */
function cpuMs(pids: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) {
    const stat = readProc(`/proc/${pid}/stat`);
    if (!stat) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    out[name] = (Number(fields[11]) + Number(fields[12])) * 10; // utime, stime (fields 14, 15)
  }
  return out;
}

/**
 * Phases of each sequential turn from log timestamps (ms, one clock): request → plan logged →
 * each agent starts executing → orchestrator has its answer → response. Approximate to ±1 ms.
 */
function phases(sys: BenchSystem, samples: TurnSample[]): [string, Summary][] {
  const at = new Map<string, number>(); // `${taskId} ${event}` -> epoch ms
  for (const child of sys.children) {
    for (const line of child.lines) {
      let j: Record<string, any>;
      try {
        j = JSON.parse(line);
      } catch {
        continue;
      }
      if (!j.taskId || !j.time) continue;
      const msg = String(j.msg ?? '');
      const t = Date.parse(j.time);
      if (msg.startsWith('plan ')) at.set(`${j.taskId} plan`, t);
      else if (msg.startsWith('executing with')) at.set(`${j.taskId} exec ${j.agentType}`, t);
      else if (/ answered \(/.test(msg)) at.set(`${j.taskId} done ${msg.split(' ')[0]}`, t);
    }
  }
  const spans: Record<string, number[]> = {};
  const add = (name: string, from?: number, to?: number) => {
    if (from !== undefined && to !== undefined) (spans[name] ??= []).push(to - from);
  };
  for (const s of samples) {
    const g = (e: string) => at.get(`${s.taskId} ${e}`);
    add('1 request → plan (lock, load, user message, plan, task)', s.startedAt, g('plan'));
    add('2 plan → research executing (dispatch, context)', g('plan'), g('exec legal-research'));
    add(
      '3 research executing → answer received',
      g('exec legal-research'),
      g('done legal-research'),
    );
    add(
      '4 answer → labor-law executing (checkpoint, dispatch, context)',
      g('done legal-research'),
      g('exec labor-law'),
    );
    add('5 labor-law executing → answer received', g('exec labor-law'), g('done labor-law'));
    add(
      '6 answer → response (reply, complete, conversation, history)',
      g('done labor-law'),
      s.endedAt,
    );
  }
  return Object.entries(spans)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => [k, summarize(v)]);
}

export async function run(): Promise<void> {
  const sys = await startBenchSystem();
  try {
    const warm = await newConversation(sys);
    for (let i = 0; i < WARMUP_TURNS; i++) await turn(sys, warm, SCRIPT[i % SCRIPT.length]);

    const pids = await cpuPids(sys);
    const before = { ...(await counters(sys)), ...prefixed('cpu ', cpuMs(pids)) };
    const seq = await sequentialTurns(sys, SEQUENTIAL_CONVS);
    const after = { ...(await counters(sys)), ...prefixed('cpu ', cpuMs(pids)) };
    const turns = summarize(seq.map((s) => s.ms));
    const turnsPerSec = await concurrentTurns(sys, CONCURRENT_CONVS, CONCURRENT_TURNS);

    // The references, same run, same machine, same redis-server and MySQL as the system.
    const t = await openTransports('loombench:echo:', sys.redis.url);
    let echo: Summary;
    let echoRps: number;
    try {
      echo = summarize(await sample(t.stock.call, { count: ECHO_SAMPLES, warmup: 200 }));
      echoRps = await echoThroughput(t.stock.call);
    } finally {
      await t.loom.close();
      await t.stock.close();
    }
    const insert = await mysqlInsert(sys.mysqlUrl);

    print({ turns, turnsPerSec, echo, echoRps, insert });
    console.log(`\nwhere a sequential turn's time goes (ms, from the apps' log timestamps):`);
    console.log(
      table(
        ['phase', 'p50', 'p99', 'mean'],
        phases(sys, seq).map(([k, s]) => [k, ms(s.p50), ms(s.p99), ms(s.mean)]),
      ),
    );
    const d = delta(before, after, seq.length);
    console.log(
      `\nper sequential turn: CPU ms of each process (/proc), MySQL statements and Redis ` +
        `commands (commands run inside Lua scripts count too; MySQL and its CPU are server-wide)`,
    );
    const cpu = d.filter(({ k }) => k.startsWith('cpu '));
    const cpuTotal = cpu.reduce((n, { per }) => n + per, 0);
    const mysql = d.filter(({ k }) => k.startsWith('mysql ') && k !== 'mysql questions');
    const redisCmds = d.filter(({ k }) => k.startsWith('redis ')).sort((a, b) => b.per - a.per);
    console.log(
      table(
        ['counter', 'per turn'],
        [
          ...cpu.map(({ k, per }) => [k, per.toFixed(1)]),
          ['cpu total (ms)', cpuTotal.toFixed(1)],
          ...mysql.map(({ k, per }) => [k, per.toFixed(1)]),
          [
            'redis commands (incl. in scripts)',
            redisCmds.reduce((n, { per }) => n + per, 0).toFixed(1),
          ],
          ...redisCmds.slice(0, 8).map(({ k, per }) => [k, per.toFixed(1)]),
        ],
      ),
    );
  } finally {
    await sys.stop();
  }
}

function print(r: {
  turns: Summary;
  turnsPerSec: number;
  echo: Summary;
  echoRps: number;
  insert: Summary;
}): void {
  console.log(
    `\nturn: POST a message → orchestrator → legal-research → labor-law (offline model, 0 ms), ` +
      `each app its own process; ${r.turns.n} sequential turns (${SEQUENTIAL_CONVS} conversations × ` +
      `${TURNS_PER_CONV}) after ${WARMUP_TURNS} warm-up; throughput: ${CONCURRENT_CONVS} concurrent ` +
      `conversations × ${CONCURRENT_TURNS} turns`,
  );
  console.log(
    table(
      ['measure', 'p50 ms', 'p99 ms', 'n', 'per second'],
      [
        [
          'whole turn',
          ms(r.turns.p50),
          ms(r.turns.p99),
          String(r.turns.n),
          `${r.turnsPerSec.toFixed(1)} turns`,
        ],
        [
          'stock Nest Redis echo',
          ms(r.echo.p50),
          ms(r.echo.p99),
          String(r.echo.n),
          `${r.echoRps.toFixed(0)} req @64`,
        ],
        ['MySQL INSERT (1 row)', ms(r.insert.p50), ms(r.insert.p99), String(r.insert.n), ''],
      ],
    ),
  );
  const budget = 3 * (2 * r.echo.p50 + 4 * r.insert.p50);
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
  console.log(
    `target turn p50 <= 3 × (2 echo + 4 inserts) = ${ms(budget)} ms: ${ms(r.turns.p50)} ms, ` +
      `${(r.turns.p50 / budget).toFixed(2)}× the budget (${verdict(r.turns.p50 <= budget)})`,
  );
  console.log(
    `target turns/s >= echo req/s / 10 = ${(r.echoRps / 10).toFixed(1)}: ${r.turnsPerSec.toFixed(1)} ` +
      `(${verdict(r.turnsPerSec >= r.echoRps / 10)})`,
  );
}
