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
