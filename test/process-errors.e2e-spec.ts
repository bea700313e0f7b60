import { spawn } from 'child_process';
import { join } from 'path';

const ROOT = join(__dirname, '..');

/** A process that logs through Loom's logger as every app does, with handleProcessErrors on. */
const PROBE = `
const { Logger } = require('@nestjs/common');
const obs = require(${JSON.stringify(join(ROOT, 'dist/libs/observability/src'))});
Logger.overrideLogger(new obs.LoomLogger(obs.createPinoLogger({ service: 'probe', level: 'info', format: 'json' })));
obs.handleProcessErrors();
void Promise.reject(new Error('the write for 13800138000 was refused'));
setTimeout(() => {
  console.log('still running');
  if (process.env.THROW) setTimeout(() => { throw new Error('boom for 13800138000'); });
}, 200);
`;

function run(env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', PROBE], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, out }));
  });
}

const lines = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));

/**
 * Node ends a process on a promise that failed with nobody awaiting it, printing a raw stack: an
 * agent handler's un-awaited write, refused, would end every execution in flight on that
 * instance, for every tenant, on every redelivery. Loom's processes log it and go on; an
 * uncaught exception is logged and ends the process (code 1). Both as JSON lines, redacted.
 */
describe('system: errors nobody handled (handleProcessErrors, as every app main installs it)', () => {
  it('logs a promise that failed unawaited, redacted, and goes on', async () => {
    const { code, out } = await run({});
    expect(code).toBe(0);
    expect(out).toContain('still running');
    expect(out).not.toContain('13800138000');
    expect(lines(out)).toContainEqual(
      expect.objectContaining({
        level: 'error',
        service: 'probe',
        msg: 'a promise nobody awaited failed',
        err: expect.objectContaining({ name: 'Error', stack: expect.stringContaining('at ') }),
      }),
    );
  });

  it('logs an uncaught exception, redacted, and exits 1', async () => {
    const { code, out } = await run({ THROW: '1' });
    expect(code).toBe(1);
    expect(out).not.toContain('13800138000');
    expect(lines(out)).toContainEqual(
      expect.objectContaining({ level: 'error', msg: 'uncaught exception: the process exits' }),
    );
  });
});
