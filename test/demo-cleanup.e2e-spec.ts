import { ChildProcess, execFile, spawn } from 'child_process';
import { once } from 'events';
import { join } from 'path';
import { promisify } from 'util';
import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';
import { freePort, sleep, TEST_MYSQL_URL } from '@loom/testing';
const { root } = require('../scripts/lib/processes');

const run = promisify(execFile);

/**
 * `npm run demo` whose apps exit at start (here: its Redis needs a password REDIS_URL lacks)
 * still removes what it made: the apps had created the demo's database before they met Redis.
 * Its cleanup met the same Redis, threw, and so left the database behind, printed ioredis'
 * "Unhandled error event" stack, and reported the cleanup's error instead of the app that exited.
 */
describe('system: npm run demo when its Redis refuses REDIS_URL', () => {
  let server: ChildProcess;
  let port: number;

  beforeAll(async () => {
    port = await freePort();
    server = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'].concat([
        '--requirepass',
        'demo-cleanup-password',
      ]),
      { stdio: 'ignore' },
    );
    const probe = new Redis(`redis://:demo-cleanup-password@127.0.0.1:${port}`, {
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
    if (server.exitCode !== null) return;
    const exited = once(server, 'exit');
    server.kill('SIGKILL');
    await exited;
  });

  it('fails naming the app that exited, and drops its database', async () => {
    const failed = await run(process.execPath, [join(root, 'scripts', 'demo.js')], {
      cwd: root,
      env: {
        ...process.env,
        LOOM_DEMO_PROFILE: 'distributed',
        REDIS_URL: `redis://127.0.0.1:${port}`,
        MYSQL_URL: `${TEST_MYSQL_URL.replace(/\/$/, '')}/loom`,
      },
      maxBuffer: 16 * 1024 * 1024,
    }).then(
      () => null,
      (err: { code?: number; stdout: string; stderr: string }) => err,
    );
    expect(failed?.code).toBe(1);
    const database = /database (loom_demo_\w+)\)/.exec(failed!.stdout)![1];
    expect(failed!.stderr).toMatch(/demo failed: \S+ exited \(code 1\)/);
    expect(failed!.stdout + failed!.stderr).not.toContain('Unhandled error event');
    const conn = await createConnection(TEST_MYSQL_URL);
    try {
      const [rows] = await conn.query('SHOW DATABASES LIKE ?', [database]);
      expect(rows).toEqual([]);
    } finally {
      await conn.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await conn.end();
    }
  });
});
