import { spawn } from 'child_process';
import { join } from 'path';
const { root, freePort } = require('../scripts/lib/processes');

/**
 * An app that cannot reach its store at start (here MySQL: nothing listens on the port, through
 * DB_START_TIMEOUT_MS) says so
 * in one line on stderr and exits 1 (docs/add-an-agent.md, runAgent; the orchestrator's main),
 * rather than leaving only a log line of Nest's exception handler. That line of Nest's is not
 * written as well: the reason is said once, where docs/add-an-agent.md says.
 */
describe('system: an app whose MySQL is out of reach at start', () => {
  const run = (app: string, env: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [join(root, 'dist', 'apps', app, 'main.js')], {
        env: { ...process.env, LOG_LEVEL: 'info', LOG_FORMAT: 'json', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk) => (stdout += String(chunk)));
      child.stderr.on('data', (chunk) => (stderr += String(chunk)));
      const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.on('exit', (code) => {
        clearTimeout(kill);
        resolve({ code, stdout, stderr });
      });
    });

  it.each([
    ['orchestrator', 'loom orchestrator: failed to start: '],
    ['labor-law-agent', 'loom labor-law agent: failed to start: '],
  ])('%s prints one line saying why it did not start, and exits 1', async (app, line) => {
    const { code, stdout, stderr } = await run(app, {
      MYSQL_URL: `mysql://root@127.0.0.1:${await freePort()}/loom_start_failure`,
      LOOM_KEY_PREFIX: `start-failure-${process.pid}:`,
      LOOM_JWT_SECRET: 'start-failure-jwt-secret-0123',
      LOOM_AGENT_SECRET: 'start-failure-agent-secret-0123',
      LOOM_PROFILE: 'distributed',
      // A refused connection is tried again until then (a MySQL restarting comes back).
      DB_START_TIMEOUT_MS: '2000',
    });
    expect(code).toBe(1);
    expect(stderr).toContain(line);
    expect(stderr).toMatch(/ECONNREFUSED/);
    expect(stderr.trim().split('\n')).toHaveLength(1);
    // No second, JSON account of the same failure from Nest's ExceptionHandler.
    const errors = stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { level: string; context?: string })
      .filter((l) => l.level === 'error' || l.context === 'ExceptionHandler');
    expect(errors).toEqual([]);
  });
});
