import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run bench:compare` runs benchmarks for minutes: an argument it does not take must be
 * refused, not dropped. (The revision names no commit, so that no version of the script starts a
 * benchmark here.)
 */
describe('system: npm run bench:compare arguments', () => {
  const compare = (...args: string[]) =>
    spawnSync(process.execPath, [join(root, 'scripts', 'bench-compare.js'), ...args], {
      cwd: root,
      encoding: 'utf8',
      timeout: 60_000,
    });

  it('refuses a third argument in one line, naming it, before looking at the revision', () => {
    const out = compare('no-such-rev-for-this-test', '1', 'turn');
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('bench:compare: unexpected argument turn');
  });
});
