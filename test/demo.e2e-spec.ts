import { execFile } from 'child_process';
import { mkdtempSync, rmSync } from 'fs';
import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';
import { tmpdir } from 'os';
import { join } from 'path';
import { promisify } from 'util';
import {
  createTestCertificates,
  PrivateMariaDb,
  TEST_REDIS_URL,
  TestCertificates,
} from '@loom/testing';
const { root } = require('../scripts/lib/processes');

const run = promisify(execFile);

/**
 * `npm run demo` against a MySQL that offers TLS, asked for it (`?ssl=true`, MYSQL_SSL_CA): the apps get MYSQL_URL's `?ssl=` option
 * as it was given, on the demo's own database, and the demo drops that database over TLS too.
 */
describe('system: npm run demo keeps the ssl option of MYSQL_URL', () => {
  let dir: string;
  let certs: TestCertificates;
  let server: PrivateMariaDb;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'loom-demo-tls-'));
    certs = await createTestCertificates(dir);
    server = await PrivateMariaDb.start([
      `--ssl-ca=${certs.ca}`,
      `--ssl-cert=${certs.cert}`,
      `--ssl-key=${certs.key}`,
    ]);
  });
  afterAll(async () => {
    await server?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  it('plays the consultation over TLS and leaves no database or key behind', async () => {
    const { stdout } = await run(process.execPath, [join(root, 'scripts', 'demo.js')], {
      cwd: root,
      env: {
        ...process.env,
        LOOM_DEMO_PROFILE: 'distributed',
        REDIS_URL: TEST_REDIS_URL,
        MYSQL_URL: `${server.url}/loom?ssl=true`,
        MYSQL_SSL_CA: certs.ca,
      },
      maxBuffer: 16 * 1024 * 1024,
    });
    expect(stdout).toContain('Done (distributed: Redis + MySQL profile).');

    const prefix = /key prefix (\S+),/.exec(stdout)![1];
    const redis = new Redis(TEST_REDIS_URL);
    try {
      expect(await redis.keys(`${prefix}*`)).toEqual([]);
    } finally {
      redis.disconnect();
    }
    const conn = await createConnection({ host: '127.0.0.1', port: server.port, user: 'root' });
    try {
      const [rows] = await conn.query("SHOW DATABASES LIKE 'loom\\_demo\\_%'");
      expect(rows).toEqual([]);
    } finally {
      await conn.end();
    }
  });
});

/**
 * An app the demo starts may refuse its environment (an OPENAI_API_KEY exported for other tools
 * makes it use `openai`, which needs LLM_MODEL): the demo says so and stops, not waiting a minute
 * for an orchestrator that is gone and then blaming a fetch.
 */
describe('system: npm run demo when an app exits at start', () => {
  it('fails naming the app that exited, with the app’s own line', async () => {
    const failed = await run(process.execPath, [join(root, 'scripts', 'demo.js')], {
      cwd: root,
      env: {
        ...process.env,
        LOOM_DEMO_PROFILE: 'embedded',
        OPENAI_API_KEY: 'sk-exported-for-another-tool',
        LLM_PROVIDER: '',
        LLM_MODEL: '',
      },
      maxBuffer: 16 * 1024 * 1024,
    }).then(
      () => null,
      (err: { code?: number; stdout: string; stderr: string }) => err,
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stdout + failed!.stderr).toContain(
      'LLM_PROVIDER=openai needs OPENAI_API_KEY and LLM_MODEL',
    );
    expect(failed?.stderr).toMatch(/demo failed: embedded exited \(code 1\)/);
  });
});
