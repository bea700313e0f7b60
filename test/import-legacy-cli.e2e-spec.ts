import { spawnSync } from 'child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run session:import-legacy` writes conversations into MYSQL_URL: an argument it does not
 * take must be refused before anything is read or written, never taken as the value of a flag
 * (a file after an unknown flag would otherwise be left out of the import without a word).
 * (MYSQL_URL names a closed port here: a run that tried to import would fail to connect instead.)
 */
describe('system: npm run session:import-legacy arguments', () => {
  let dir: string;
  let file: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'loom-import-cli-'));
    file = join(dir, 'cli_session_1.json');
    writeFileSync(file, JSON.stringify({ memory: { messages: [] } }));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const importLegacy = (...args: string[]) =>
    spawnSync(
      process.execPath,
      [join(root, 'dist', 'libs', 'session', 'src', 'cli', 'import-legacy.js'), ...args],
      {
        env: { ...process.env, MYSQL_URL: 'mysql://root@127.0.0.1:1/loom_import_cli' },
        encoding: 'utf8',
        timeout: 60_000,
      },
    );

  it('prints its usage for --help and exits 0, importing nothing', () => {
    const out = importLegacy('--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run session:import-legacy');
  });

  it('refuses an unknown flag, naming it, instead of swallowing the file after it', () => {
    const out = importLegacy('--tenant', 't1', '--user', 'u1', '--force', file);
    expect(out.status).toBe(2);
    expect(out.stderr).toContain('--force');
    expect(out.stderr).toContain('usage: npm run session:import-legacy');
    expect(out.stderr).not.toMatch(/\n\s+at /);
  });

  it('refuses a flag given twice or without its value', () => {
    for (const args of [
      ['--tenant', 't1', '--tenant', 't2', '--user', 'u1', file],
      ['--user', 'u1', file, '--tenant'],
    ]) {
      const out = importLegacy(...args);
      expect(out.status).toBe(2);
      expect(out.stderr).toContain('usage: npm run session:import-legacy');
    }
  });
});
