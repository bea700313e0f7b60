import { spawn } from 'child_process';
import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * An app started by scripts/lib/processes.js (the demo, `npm run bench`, the system tests) whose
 * starter is killed outright (`kill`, a CI job's time-out) stops too, rather than run on for good
 * holding its port, its database and its data directory.
 */
describe('system: an app whose starter is killed', () => {
  let dataDir: string;
  let appPid = 0;
  beforeAll(() => (dataDir = mkdtempSync(join(tmpdir(), 'loom-orphan-'))));
  afterAll(() => {
    if (appPid && alive(appPid)) process.kill(appPid, 'SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('stops once its parent is gone', async () => {
    const starter = spawn(
      process.execPath,
      [
        '-e',
        `const p = require(${JSON.stringify(join(root, 'scripts', 'lib', 'processes.js'))});
         const c = p.startApp('embedded', { LOOM_DATA_DIR: process.argv[1], PORT: '0' }, {
           onLine: (app, line) => line.includes('listening on port') && console.log(c.pid),
         });
         setInterval(() => {}, 1000);`,
        dataDir,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    appPid = await new Promise<number>((resolve) =>
      starter.stdout.once('data', (d) => resolve(Number(String(d).trim()))),
    );
    // Started and idle: it writes nothing more that would fail on the pipe of a dead parent.
    await new Promise((r) => setTimeout(r, 2000));
    expect(alive(appPid)).toBe(true);
    starter.kill('SIGKILL');
    // Polled, not timed: the app watches its parent every second and then stops as on SIGTERM.
    for (let i = 0; i < 300 && alive(appPid); i++) await new Promise((r) => setTimeout(r, 100));
    expect(alive(appPid)).toBe(false);
  });
});
