/**
 * What a benchmark started outside its own process (a redis-server, apps, a database, a temp
 * dir), removed when `npm run bench` is stopped (SIGINT, SIGTERM, SIGHUP, or its parent killed:
 * scripts/lib/exit-with-parent.js turns that into a SIGTERM) as its `finally` would have.
 */
import { readdirSync, readFileSync } from 'fs';

const pending = new Set<() => Promise<void>>();

/**
 * Registers `cleanup` to run on such a stop, and returns it to be called as usual: it runs once,
 * whichever comes first, and leaves the registry when called.
 */
export function onInterrupt(cleanup: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  const once = (): Promise<void> => {
    pending.delete(once);
    return (done ??= cleanup());
  };
  pending.add(once);
  return once;
}

/**
 * Runs every registered cleanup, latest first (apps before the servers they use), then kills any
 * child process still running: one started but not registered yet (a redis-server still being
 * waited for) would otherwise outlive us, reparented, for good.
 */
export async function cleanUpAll(): Promise<void> {
  for (const cleanup of [...pending].reverse())
    await cleanup().catch((err: unknown) =>
      console.error(`cleanup failed: ${err instanceof Error ? err.message : String(err)}`),
    );
  for (const pid of childPids()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

/** This process's children, from /proc (Linux; elsewhere none are found). */
function childPids(): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc').filter((e) => /^\d+$/.test(e));
  } catch {
    return [];
  }
  return entries.map(Number).filter((pid) => {
    try {
      // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid;
    } catch {
      return false;
    }
  });
}
