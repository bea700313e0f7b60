import { ChildProcess, execFileSync, spawn } from 'child_process';
import { randomBytes } from 'crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { EMBEDDED_JWT_SECRET } from '../apps/orchestrator/src/app.module';
import { AppProcess, client, startEmbedded, startEmbeddedApp } from './system';
const { stopAll, waitFor, signJwt, freePort } = require('../scripts/lib/processes');

/**
 * The embedded profile as `npm run demo` runs it on a machine with only Node: every app in one
 * process, JSON files, TCP between orchestrator and agents. REDIS_URL and MYSQL_URL point at a
 * closed port, so the process could not use Redis or MySQL even by mistake.
 */
describe('system: the embedded profile (only Node)', () => {
  const secret = randomBytes(24).toString('hex');
  const token = signJwt({ sub: 'alice', tid: 'tenant-e' }, secret);
  let dataDir: string;
  let children: AppProcess[] = [];
  let api: ReturnType<typeof client>;
  let base: string;

  async function start(): Promise<void> {
    const embedded = await startEmbedded(dataDir, secret);
    children.push(embedded.child);
    base = embedded.base;
    api = client(base, token);
    await waitFor(async () => (await fetch(`${base}/health`)).status === 200, {
      what: 'the embedded orchestrator',
      timeoutMs: 60_000,
    });
    await waitFor(async () => (await api('GET', '/v1/agents')).body?.items?.length >= 3, {
      what: 'three agents in the embedded process',
      timeoutMs: 30_000,
    });
  }

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-test-'));
    await start();
  });

  afterAll(async () => {
    await stopAll(children);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers the follow-up with the first turn in context, and keeps it across a restart', async () => {
    const id = (await api('POST', '/v1/conversations', {})).body.conversationId;
    const t1 = await api('POST', `/v1/conversations/${id}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    expect(t1.status).toBe(201);
    expect(t1.body.reply.agentType).toBe('labor-law');

    const t2 = await api('POST', `/v1/conversations/${id}/messages`, {
      content: '上面那份合同里关于竞业协议的部分怎么看?',
    });
    expect(t2.status).toBe(201);
    expect(t2.body.reply.agentType).toBe('labor-law');
    const task = (await api('GET', `/v1/tasks/${t2.body.taskId}`)).body;
    const labor = task.executions.find((e: { agentType: string }) => e.agentType === 'labor-law');
    expect(labor.context.historyMessages).toBe(2);
    expect(labor.context.sharedKeys).toEqual(['research.statutes']);
    expect(t2.body.reply.content).toContain('我跟公司签的劳动合同有问题');

    // The JSON files are the store: a new process sees the conversation whole.
    await stopAll(children);
    children = [];
    await start();
    const t3 = await api('POST', `/v1/conversations/${id}/messages`, {
      content: 'What about the non-compete period in that contract?',
    });
    expect(t3.status).toBe(201);
    expect(t3.body.reply.agentType).toBe('labor-law');
    const task3 = (await api('GET', `/v1/tasks/${t3.body.taskId}`)).body;
    expect(
      task3.executions.find((e: { agentType: string }) => e.agentType === 'labor-law').context
        .historyMessages,
    ).toBe(4);
    const messages = (await api('GET', `/v1/conversations/${id}/messages`)).body.items;
    expect(messages.map((m: { seq: number }) => m.seq)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('DELETE of a conversation leaves nothing of it in the data directory', async () => {
    const id = (await api('POST', '/v1/conversations', {})).body.conversationId;
    const turn = await api('POST', `/v1/conversations/${id}/messages`, {
      content: 'My landlord keeps the deposit of my lease',
    });
    expect(turn.status).toBe(201);
    const names = [id, turn.body.taskId];
    const mentioning = () =>
      (readdirSync(dataDir, { recursive: true }) as string[]).filter(
        (path) =>
          names.some((name) => path.includes(name)) ||
          (statSync(join(dataDir, path)).isFile() &&
            names.some((name) => readFileSync(join(dataDir, path), 'utf8').includes(name))),
      );
    expect(mentioning().length).toBeGreaterThan(0);
    expect((await api('DELETE', `/v1/conversations/${id}`)).status).toBe(204);
    expect(mentioning()).toEqual([]);
    expect((await api('GET', `/v1/conversations/${id}`)).status).toBe(404);
  });

  it('a second process on the same data directory refuses to start, naming the one that holds it', async () => {
    const second = await startEmbedded(dataDir, secret);
    children.push(second.child);
    const code = await new Promise((resolve) => second.child.once('exit', resolve));
    expect(code).toBe(1);
    expect(second.child.lines.join('\n')).toContain(
      `LOOM_DATA_DIR ${dataDir} is in use by process ${children[0].pid}`,
    );
    expect((await api('GET', '/v1/conversations')).status).toBe(200);
  });

  it('reports the store it uses in /health, not MySQL or Redis', async () => {
    const res = await fetch(`${base}/health`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { status: string; details: Record<string, unknown> };
    expect(body.status).toBe('ok');
    expect(Object.keys(body.details)).toEqual(['file']);
  });
});

describe('system: the embedded profile without LOOM_JWT_SECRET', () => {
  let dataDir: string;
  const children: AppProcess[] = [];

  beforeAll(() => (dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-secret-'))));
  afterAll(async () => {
    await stopAll(children);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('accepts tokens of its own random secret (npm run token), not of one in the source', async () => {
    const started = await startEmbeddedApp('embedded', dataDir, { LOG_LEVEL: 'warn' });
    children.push(started.child);
    await waitFor(async () => (await fetch(`${started.base}/health`)).status === 200, {
      what: 'the embedded orchestrator',
      timeoutMs: 60_000,
    });
    const secretFile = join(dataDir, 'token-secret');
    expect(readFileSync(secretFile, 'utf8')).toMatch(/^[0-9a-f]{64}$/);
    expect(statSync(secretFile).mode & 0o077).toBe(0);

    const forged = signJwt({ sub: 'mallory', tid: 'tenant-e' }, EMBEDDED_JWT_SECRET);
    expect((await client(started.base, forged)('GET', '/v1/conversations')).status).toBe(401);

    const token = execFileSync(process.execPath, ['scripts/token.js', 'alice', 'tenant-e'], {
      env: { PATH: process.env.PATH, LOOM_PROFILE: 'embedded', LOOM_DATA_DIR: dataDir },
      encoding: 'utf8',
    }).trim();
    const listed = await client(started.base, token)('GET', '/v1/conversations');
    expect([listed.status, listed.body]).toEqual([200, { items: [], nextCursor: null }]);
  });
});

describe('system: the embedded profile when its disk takes no more', () => {
  const secret = randomBytes(24).toString('hex');
  const token = signJwt({ sub: 'alice', tid: 'tenant-e' }, secret);
  let dataDir: string;
  const children: ChildProcess[] = [];

  beforeAll(() => (dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-full-'))));
  afterAll(async () => {
    await stopAll(children);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers 503 UNAVAILABLE, keeps serving what it has, and the retry succeeds once it takes writes', async () => {
    // A file size limit of 64 KB (RLIMIT_FSIZE): writes past it fail with EFBIG, as on a full disk.
    const port = await freePort();
    const limited = spawn(
      'bash',
      ['-c', `ulimit -f 64 && exec "${process.execPath}" dist/apps/embedded/main.js`],
      {
        cwd: join(__dirname, '..'),
        env: {
          ...process.env,
          LOOM_PROFILE: 'embedded',
          LOOM_DATA_DIR: dataDir,
          PORT: String(port),
          LOOM_JWT_SECRET: secret,
          LOG_LEVEL: 'warn',
          REDIS_URL: 'redis://127.0.0.1:1',
          MYSQL_URL: 'mysql://root@127.0.0.1:1/none',
        },
        stdio: 'ignore',
      },
    );
    children.push(limited);
    let api = client(`http://127.0.0.1:${port}`, token);
    await waitFor(async () => (await api('GET', '/v1/agents')).body?.items?.length >= 3, {
      what: 'the embedded process under a file size limit',
      timeoutMs: 60_000,
    });
    const id = (await api('POST', '/v1/conversations', {})).body.conversationId;
    const send = (n: number) =>
      api(
        'POST',
        `/v1/conversations/${id}/messages`,
        { content: `lease ${n} ${'x'.repeat(20_000)}` },
        { 'idempotency-key': `full-disk-turn-${n}` },
      );
    let refused: { status: number; body: any } | null = null;
    let n = 0;
    while (!refused && n < 20) {
      const res = await send(++n);
      if (res.status !== 201) refused = res;
    }
    expect(refused).toMatchObject({ status: 503, body: { code: 'UNAVAILABLE' } });
    expect(limited.exitCode).toBeNull();
    const stored = (await api('GET', `/v1/conversations/${id}/messages?limit=200`)).body.items;
    expect(stored.map((m: { seq: number }) => m.seq)).toEqual(
      Array.from({ length: stored.length }, (_, i) => i + 1),
    );

    // Room again (no limit): the same key takes the turn up, stored once, after the others.
    await stopAll(children);
    const again = await startEmbedded(dataDir, secret);
    children.push(again.child);
    api = client(again.base, token);
    await waitFor(async () => (await api('GET', '/v1/agents')).body?.items?.length >= 3, {
      what: 'the embedded process again',
      timeoutMs: 60_000,
    });
    const retried = await send(n);
    expect(retried.status).toBe(201);
    const all = (await api('GET', `/v1/conversations/${id}/messages?limit=200`)).body.items;
    expect(all.map((m: { seq: number }) => m.seq)).toEqual(
      Array.from({ length: all.length }, (_, i) => i + 1),
    );
    expect(
      all.filter((m: { content: string }) => m.content.startsWith(`lease ${n} `)),
    ).toHaveLength(1);
  });
});
