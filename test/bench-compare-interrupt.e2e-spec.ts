import { execFileSync, spawn } from 'child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run bench:compare` stopped with Ctrl-C (SIGINT to its whole process group, as a terminal
 * sends it) while it builds the earlier revision: it removes its temporary git worktree and the
 * directory, rather than leaving both behind.
 */
describe('system: bench:compare interrupted', () => {
  const worktrees = () =>
    execFileSync('git', ['worktree', 'list'], { cwd: root, encoding: 'utf8' });
  let tmp: string;
  beforeEach(() => (tmp = mkdtempSync(join(tmpdir(), 'bench-compare-int-'))));
  afterEach(() => {
    for (const d of readdirSync(tmp))
      execFileSync('git', ['worktree', 'remove', '--force', join(tmp, d)], {
        cwd: root,
        stdio: 'ignore',
      });
    rmSync(tmp, { recursive: true, force: true });
    execFileSync('git', ['worktree', 'prune'], { cwd: root });
  });

  it('removes its worktree and directory on Ctrl-C, and exits non-zero', async () => {
    const child = spawn(
      process.execPath,
      [join(root, 'scripts', 'bench-compare.js'), 'HEAD', '1'],
      {
        cwd: root,
        env: { ...process.env, TMPDIR: tmp },
        stdio: 'ignore',
        detached: true,
      },
    );
    const exited = new Promise<number | null>((resolve) =>
      child.on('exit', (code, signal) => resolve(signal ? 128 : code)),
    );
    // Once the worktree is there and the build of it has begun (node_modules linked).
    const linked = () => {
      const [dir] = readdirSync(tmp);
      return dir && existsSync(join(tmp, dir, 'node_modules')) ? join(tmp, dir) : undefined;
    };
    let dir: string | undefined;
    for (let i = 0; i < 600 && !(dir = linked()); i++) await new Promise((r) => setTimeout(r, 100));
    expect(dir).toBeDefined();
    process.kill(-child.pid!, 'SIGINT');
    expect(await exited).not.toBe(0);
    expect(readdirSync(tmp)).toEqual([]);
    expect(worktrees()).not.toContain(dir);
  });
});
