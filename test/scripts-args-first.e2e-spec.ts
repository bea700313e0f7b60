import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run chaos` and `npm run bench` build the whole tree (half a minute and more) before they
 * run: `--help`, a mistyped option or an unknown benchmark must be answered before that, without
 * building (the build prints "built N files").
 */
describe('system: npm run chaos / bench read their arguments before building', () => {
  const script = (name: string, ...args: string[]) =>
    spawnSync(process.execPath, [join(root, 'scripts', name), ...args], {
      cwd: root,
      encoding: 'utf8',
      timeout: 110_000,
    });

  it('chaos --help prints its usage and exits 0 without building', () => {
    const out = script('chaos.js', '--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run chaos -- [--minutes N]');
    expect(out.stdout + out.stderr).not.toContain('built ');
  });

  it('chaos refuses an unknown option in one line without building', () => {
    const out = script('chaos.js', '--minute', '10');
    expect(out.status).toBe(2);
    expect(out.stdout + out.stderr).not.toContain('built ');
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('chaos: unknown option --minute');
  });

  it('bench refuses an unknown benchmark in one line without building', () => {
    const out = script('bench.js', 'trun');
    expect(out.status).toBe(2);
    expect(out.stdout + out.stderr).not.toContain('built ');
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('unknown benchmark(s): trun; known: ');
  });
});

/**
 * The operator commands ran a full build (`node scripts/build.js && node dist/…`) before reading
 * their arguments: `--help` or a mistyped option must be answered first, without building.
 */
describe('system: npm run agents:retire / session:import-legacy / migration:run read their arguments before building', () => {
  const npm = (name: string, ...args: string[]) =>
    spawnSync(
      process.platform === 'win32' ? 'npm.cmd' : 'npm',
      ['run', '-s', name, '--', ...args],
      {
        cwd: root,
        encoding: 'utf8',
        timeout: 110_000,
      },
    );

  it.each([
    ['agents:retire', 'usage: npm run agents:retire -- [--force] <agentType>…'],
    ['session:import-legacy', 'usage: npm run session:import-legacy -- --tenant <tenantId>'],
    ['migration:run', 'usage: npm run migration:run'],
  ])('%s --help prints its usage and exits 0 without building', (name, usage) => {
    const out = npm(name, '--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain(usage);
    expect(out.stdout + out.stderr).not.toContain('built ');
  });

  it.each([
    ['agents:retire', ['--forse', 'tax-law']],
    ['session:import-legacy', ['--tenant', 't1', '--usr', 'u1', 'a.json']],
    ['migration:run', ['--all']],
  ])('%s refuses a bad argument (exit 2) without building', (name, args) => {
    const out = npm(name, ...(args as string[]));
    expect(out.status).toBe(2);
    expect(out.stdout + out.stderr).not.toContain('built ');
    expect(out.stderr).toContain(`usage: npm run ${name}`);
  });
});
