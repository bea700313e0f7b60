import { mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'fs';
import { join, resolve } from 'path';

/** The lock file's name in the data directory (never a session directory: not a valid id). */
export const DATA_DIR_LOCK = 'loom.lock';

const held = new Set<string>();

/** Whether a process of this id runs (one we may not signal runs too). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Claims `dir` for this process: the file store serves ONE process (its writes are ordered, and
 * its fences kept, in that process's memory), so a second one on the same directory would
 * corrupt its lists and run turns beside the first's. Writes `<dir>/loom.lock` holding this
 * process's id; one left by a process that no longer runs (killed) is taken over. Throws, naming
 * the holder, while another live process holds it. Released when this process exits.
 */
export function lockDataDir(dir: string): void {
  const path = join(resolve(dir), DATA_DIR_LOCK);
  if (held.has(path)) return;
  mkdirSync(dirOf(path), { recursive: true, mode: 0o700 });
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
    }
    const holder = Number.parseInt(readText(path), 10);
    if (Number.isSafeInteger(holder) && holder > 0 && holder !== process.pid && alive(holder)) {
      throw new Error(
        `LOOM_DATA_DIR ${dir} is in use by process ${holder} (${path}): the embedded profile's ` +
          'files serve one process at a time; stop that one, or give this one another LOOM_DATA_DIR',
      );
    }
    // Left by a process that is gone: moved aside (one step, so two starting at once do not both
    // remove it and each write its own), then claimed as above.
    try {
      renameSync(path, `${path}.${process.pid}.stale`);
      unlinkSync(`${path}.${process.pid}.stale`);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  held.add(path);
  process.once('exit', () => {
    try {
      if (Number.parseInt(readText(path), 10) === process.pid) unlinkSync(path);
    } catch {
      // Gone already, or the directory was removed: nothing to release.
    }
  });
}

function dirOf(path: string): string {
  return resolve(path, '..');
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return '';
    throw err;
  }
}
