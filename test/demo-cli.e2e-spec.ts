import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run demo`'s arguments: it takes none. `npm run demo -- --help` used to build and run the
 * whole demo (half a minute and more), and so did a typo.
 */
describe('system: npm run demo arguments', () => {
  const demo = (...args: string[]) =>
    spawnSync(process.execPath, [join(root, 'scripts', 'demo.js'), ...args], {
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, LOOM_DEMO_PROFILE: 'embedded' },
    });

  it('--help prints its usage and runs nothing', () => {
    const out = demo('--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run demo');
    expect(out.stdout).not.toContain('build');
  });

  it.each([['--profile', 'embedded'], ['embedded']])(
    'refuses %j in one line, exit 2, running nothing',
    (...args) => {
      const out = demo(...args);
      expect(out.status).toBe(2);
      expect(out.stdout).toBe('');
      expect(out.stderr.trim().split('\n')).toHaveLength(2);
      expect(out.stderr).toContain(`unknown argument: ${args[0]}`);
      expect(out.stderr).toContain('usage: npm run demo');
    },
  );
});
