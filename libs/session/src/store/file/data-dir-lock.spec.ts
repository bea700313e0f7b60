import { spawn, spawnSync } from 'child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { DATA_DIR_LOCK, lockDataDir } from './data-dir-lock';

describe('lockDataDir', () => {
  const dirs: string[] = [];
  const fresh = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'loom-lock-'));
    dirs.push(dir);
    return dir;
  };
  afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

  it('writes the lock with this process id, and takes it again from this process', () => {
    const dir = fresh();
    lockDataDir(dir);
    lockDataDir(dir);
    expect(readFileSync(join(dir, DATA_DIR_LOCK), 'utf8')).toBe(`${process.pid}\n`);
  });

  it('refuses a directory that a live process holds, naming it', async () => {
    const dir = fresh();
    const holder = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    try {
      writeFileSync(join(dir, DATA_DIR_LOCK), `${holder.pid}\n`);
      expect(() => lockDataDir(dir)).toThrow(
        `LOOM_DATA_DIR ${dir} is in use by process ${holder.pid}`,
      );
    } finally {
      holder.kill('SIGKILL');
    }
  });

  it('takes over the lock of a process that no longer runs (killed)', () => {
    const dir = fresh();
    const gone = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
      encoding: 'utf8',
    }).stdout;
    writeFileSync(join(dir, DATA_DIR_LOCK), `${gone}\n`);
    lockDataDir(dir);
    expect(readFileSync(join(dir, DATA_DIR_LOCK), 'utf8')).toBe(`${process.pid}\n`);
  });
});
