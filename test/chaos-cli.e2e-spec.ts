import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run chaos` kills processes for minutes: `--help` and a mistyped option must not start it.
 * (`--minutes 0` is refused too, so that this test starts no audit on any version.)
 */
describe('system: npm run chaos arguments', () => {
  const chaos = (...args: string[]) =>
    spawnSync(
      process.execPath,
      [join(root, 'dist', 'libs', 'testing', 'src', 'chaos', 'cli.js'), ...args],
      {
        encoding: 'utf8',
        timeout: 60_000,
      },
    );

  it('prints its usage for --help and exits 0', () => {
    const out = chaos('--help', '--minutes', '0');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run chaos -- [--minutes N]');
  });

  it('refuses an option it does not know in one line, naming it', () => {
    const out = chaos('--minute', '10', '--minutes', '0');
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('unknown option --minute');
  });

  it.each(['--seed', '--conversations'])(
    'refuses %s without its value rather than run with a default',
    (option) => {
      const out = chaos('--minutes', '0', option);
      expect(out.status).toBe(2);
      expect(out.stderr.trim().split('\n')).toHaveLength(1);
      expect(out.stderr).toContain(`chaos: ${option} needs a value`);
    },
  );

  it('refuses an option given twice in one line, naming it', () => {
    const out = chaos('--minutes', '0', '--seed', '1', '--seed', '2');
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('chaos: --seed given twice');
  });
});
