import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run migration:run` changes the database of MYSQL_URL: asked for help, or given an
 * argument it does not take, it must say so and touch nothing. (MYSQL_URL names a closed port
 * here: a run that tried to migrate would fail to connect instead.)
 */
describe('system: npm run migration:run arguments', () => {
  const migrate = (...args: string[]) =>
    spawnSync(
      process.execPath,
      [join(root, 'dist', 'libs', 'session', 'src', 'cli', 'migrate.js'), ...args],
      {
        env: { ...process.env, MYSQL_URL: 'mysql://root@127.0.0.1:1/loom_migration_cli' },
        encoding: 'utf8',
        timeout: 60_000,
      },
    );

  it('prints its usage for --help and exits 0, migrating nothing', () => {
    const out = migrate('--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run migration:run');
  });

  it('refuses an argument in one line, migrating nothing', () => {
    const out = migrate('production');
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('usage: npm run migration:run');
  });
});
