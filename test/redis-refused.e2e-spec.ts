import { ChildProcess, spawn } from 'child_process';
import { once } from 'events';
import { join } from 'path';
import Redis from 'ioredis';
import { createTestDatabase, freePort, sleep, TEST_REDIS_URL } from '@loom/testing';
const { root } = require('../scripts/lib/processes');

/**
 * A REDIS_URL the server refuses (no password where it requires one, a wrong one, a database
 * number it does not have) is a mistake in the configuration, not an outage: the app says so in
 * one line and exits 1, as it does for MySQL credentials it refuses, instead of starting, logging
 * the refusal every 2 s and answering 503 (or, for the database number, running on database 0).
 */
describe('system: an app whose REDIS_URL the server refuses', () => {
  const password = 'redis-refused-password-0123';
  let server: ChildProcess;
  let port: number;
  let db: Awaited<ReturnType<typeof createTestDatabase>>;

  beforeAll(async () => {
    db = await createTestDatabase('loom_redis_refused');
    port = await freePort();
    // A redis-server of this suite's own: the shared one needs no password.
    server = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'].concat([
        '--requirepass',
        password,
      ]),
      { stdio: 'ignore' },
    );
    const probe = new Redis(`redis://:${password}@127.0.0.1:${port}`, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
    });
    probe.on('error', () => undefined);
    for (
      let waited = 0;
      !(await probe.ping().then(
        () => true,
        () => false,
      ));
      waited += 50
    ) {
      if (waited > 5000) throw new Error('redis-server did not start');
      await sleep(50);
    }
    probe.disconnect();
  });

  afterAll(async () => {
    if (server.exitCode === null) {
      const exited = once(server, 'exit');
      server.kill('SIGKILL');
      await exited;
    }
    await db?.drop();
  });

  const run = (app: string, redisUrl: string) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [join(root, 'dist', 'apps', app, 'main.js')], {
        env: {
          ...process.env,
          LOG_LEVEL: 'fatal',
          REDIS_URL: redisUrl,
          MYSQL_URL: db.url,
          LOOM_KEY_PREFIX: `redis-refused-${process.pid}:`,
          LOOM_JWT_SECRET: 'redis-refused-jwt-secret-0123',
          LOOM_AGENT_SECRET: 'redis-refused-agent-secret-0123',
          LOOM_PROFILE: 'distributed',
          PORT: '0',
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk) => (stderr += String(chunk)));
      // An app that started anyway is killed; its null code fails the test.
      const kill = setTimeout(() => child.kill('SIGKILL'), 30_000);
      child.on('exit', (code) => {
        clearTimeout(kill);
        resolve({ code, stderr });
      });
    });

  it.each([
    ['orchestrator', 'no password', () => `redis://127.0.0.1:${port}`, /NOAUTH/],
    ['labor-law-agent', 'a wrong password', () => `redis://:wrong@127.0.0.1:${port}`, /WRONGPASS/],
    ['orchestrator', 'a database it does not have', () => `${TEST_REDIS_URL}/99`, /DB index/],
  ])('%s with %s exits 1 naming the refusal', async (app, _what, url, refusal) => {
    const { code, stderr } = await run(app, url());
    expect(code).toBe(1);
    expect(stderr).toMatch(/failed to start: the Redis at REDIS_URL refused the connection: /);
    expect(stderr).toMatch(refusal);
  });
});
