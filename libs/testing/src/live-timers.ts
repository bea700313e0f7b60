/**
 * Why a process would not exit, as `why-is-node-running` tells it, for the timers a piece of code
 * starts: from the call on, every setTimeout/setInterval is recorded with where it was started.
 * `live()` lists those still pending and holding the process open (not cleared, not fired, not
 * unref'd) that the project's code started (not a library's), each with its delay and the first
 * frames of its stack: after a graceful close it
 * should be empty, or the process stays alive until they fire. `restore()` puts the globals back.
 */
export function trackTimers(): { live(): string[]; restore(): void } {
  const g = globalThis as any;
  const original = { setTimeout: g.setTimeout, setInterval: g.setInterval };
  const started: Array<{ timer: NodeJS.Timeout; what: string }> = [];
  for (const name of ['setTimeout', 'setInterval'] as const)
    g[name] = (fn: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      const timer = original[name](fn, ms, ...args);
      const frames = (new Error().stack ?? '')
        .split('\n')
        .slice(2, 6)
        .map((l) => l.trim());
      // Those the project's code started, itself or through a library (a command's timeout):
      // a library's own housekeeping (ioredis ending a socket) is its business.
      if (frames.every((f) => f.includes('/node_modules/') || !f.includes('/'))) return timer;
      // ioredis's disconnect() arms a 2 s timer that ends a socket still open, whoever calls it:
      // its housekeeping too (it is cleared once the socket closes).
      if (frames[0]?.includes('/ioredis/built/connectors/')) return timer;
      started.push({ timer, what: `${name}(${ms}ms) ${frames.join(' < ')}` });
      return timer;
    };
  return {
    live: () =>
      started
        .filter(({ timer }) => !(timer as any)._destroyed && timer.hasRef())
        .map(({ what }) => what),
    restore: () => Object.assign(g, original),
  };
}
