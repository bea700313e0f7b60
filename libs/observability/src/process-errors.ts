import { format } from 'util';
import { Logger } from '@nestjs/common';

/** A logged stack's length at most: whole lines, so a cut never splits what redaction looks for. */
const MAX_STACK_CHARS = 4000;

let installed = false;
let consoleRouted = false;

/**
 * `console.warn`, which Loom's code never calls, written as a warning through the app's logger
 * (JSON, with the MDC, PII redacted) rather than as raw text among the JSON lines: the Redis
 * client (ioredis) warns this way, e.g. of a password sent to a Redis that needs none, on every
 * connection. Its own `[WARN] ` / `[ERROR] ` prefix gives the level.
 */
export function routeConsoleWarnings(log: Logger = new Logger('Console')): void {
  if (consoleRouted) return;
  consoleRouted = true;
  console.warn = (...args: unknown[]) => {
    const text = format(...args);
    const error = /^\[ERROR\] /.exec(text);
    const msg = text.replace(/^\[(WARN|ERROR)\] /, '');
    if (error) log.error(msg);
    else log.warn(msg);
  };
}

/**
 * What a Loom process does with an error nobody handled (each app's `main` installs this once,
 * logging through the app's logger: JSON, with the MDC, PII redacted):
 * - A promise that failed with nobody awaiting it (an agent handler's un-awaited write that was
 *   refused, say) is logged as an error, and the process goes on. Node's own default ends the
 *   process, printing a raw stack: every execution in flight on it, for every tenant, would end
 *   with it, and again on every redelivery of the request that did it.
 * - An uncaught exception leaves state nothing vouches for: it is logged, then the process exits
 *   with code 1, for its supervisor to start it again.
 */
export function handleProcessErrors(log: Logger = new Logger('Process')): void {
  if (installed) return;
  installed = true;
  routeConsoleWarnings();
  process.on('unhandledRejection', (reason) => {
    log.error({ msg: 'a promise nobody awaited failed', err: described(reason) });
  });
  process.on('uncaughtException', (err) => {
    log.error({ msg: 'uncaught exception: the process exits', err: described(err) });
    process.exit(1);
  });
}

function described(reason: unknown): Record<string, string> {
  if (!(reason instanceof Error)) return { message: String(reason) };
  const lines = (reason.stack ?? '').split('\n');
  let stack = '';
  for (const line of lines) {
    if (stack.length + line.length + 1 > MAX_STACK_CHARS) break;
    stack += (stack ? '\n' : '') + line;
  }
  return { name: reason.name, message: reason.message, stack };
}
