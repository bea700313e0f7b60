import { LoomError, LoomErrorCode } from '../../errors/session-error';

/** Driver codes that mean "the database is not reachable right now", not "this query is wrong". */
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'POOL_CLOSED',
  'ER_CON_COUNT_ERROR',
  'ER_SERVER_SHUTDOWN',
  'ER_CONNECTION_KILLED',
  'ER_NET_READ_INTERRUPTED',
  'ER_NET_WRITE_INTERRUPTED',
  'CR_SERVER_GONE_ERROR',
  'CR_SERVER_LOST',
]);

/**
 * MySQL/MariaDB error numbers of the same kind (server shutting down, too many connections, the
 * user's own connection limits: ER_TOO_MANY_USER_CONNECTIONS, ER_USER_LIMIT_REACHED…).
 */
const CONNECTION_ERRNOS = new Set([1040, 1053, 1203, 1226, 1927, 2002, 2003, 2006, 2013]);

const CLOSED_STATE = /closed state|connection lost|pool is closed|not connected/i;

/** Seconds a statement refused by a full pool queue is told to wait (Retry-After). */
export const POOL_FULL_RETRY_AFTER_S = 1;

/** True when `err` (raw mysql2 or TypeORM-wrapped) says the database could not be reached. */
export function isConnectionError(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { code?: unknown; errno?: unknown; message?: unknown; driverError?: unknown };
  const inner = (e.driverError ?? {}) as { code?: unknown; errno?: unknown };
  for (const code of [e.code, inner.code])
    if (typeof code === 'string' && CONNECTION_CODES.has(code)) return true;
  for (const errno of [e.errno, inner.errno])
    if (typeof errno === 'number' && CONNECTION_ERRNOS.has(errno)) return true;
  return typeof e.message === 'string' && CLOSED_STATE.test(e.message) && !LoomError.is(err);
}

/** True when `err` says MySQL could not be reached: a driver error, or asUnavailable's of one. */
export function isUnreachable(err: unknown): boolean {
  return (
    isConnectionError(err) ||
    (LoomError.is(err, LoomErrorCode.UNAVAILABLE) && err.details?.unreachable === true)
  );
}

/**
 * True when mysql2 refused the statement because every connection of the pool was busy and its
 * wait queue full ("Queue limit reached."): load on a database that answers, not one out of reach.
 */
export function isPoolQueueFull(err: unknown): boolean {
  if (!err || typeof err !== 'object' || LoomError.is(err)) return false;
  const message = (err as { message?: unknown }).message;
  return typeof message === 'string' && /^queue limit reached/i.test(message);
}

/** Lock contention that outlasted its retries (ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK). */
const CONTENTION_ERRNOS = new Set([1205, 1213]);

/** True when `err` says the statement lost to other writers: it may well succeed if retried. */
export function isContentionError(err: unknown): boolean {
  return hasErrno(err, CONTENTION_ERRNOS);
}

/**
 * The server refuses writes for now, whatever they hold: it is read-only (ER_OPTION_PREVENTS_STATEMENT
 * under read_only, the former primary after a failover; ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION;
 * ER_READ_ONLY_MODE) or out of space (ER_RECORD_FILE_FULL, ER_DISK_FULL). Nothing was written.
 */
const READ_ONLY_ERRNOS = new Set([1290, 1792, 1836]);
const REFUSED_FOR_NOW_ERRNOS = new Set([...READ_ONLY_ERRNOS, 1114, 1021]);

/**
 * True when `err` says the connection's server is read-only: after a failover, the former
 * primary, which the connections opened before it still reach.
 */
export function isReadOnlyServer(err: unknown): boolean {
  return hasErrno(err, READ_ONLY_ERRNOS);
}

/** True when `err` says the server takes no writes for now (read-only, full): not the request's fault. */
export function isRefusedForNow(err: unknown): boolean {
  return hasErrno(err, REFUSED_FOR_NOW_ERRNOS);
}

/**
 * The server stopped the statement before its end: an operator's KILL QUERY
 * (ER_QUERY_INTERRUPTED), or a limit on how long a statement may run (MariaDB's
 * max_statement_time: ER_STATEMENT_TIMEOUT; MySQL's max_execution_time: ER_QUERY_TIMEOUT).
 */
const INTERRUPTED_ERRNOS = new Set([1317, 1969, 3024]);

/** True when the server interrupted the statement: it may well succeed if retried. */
export function isInterrupted(err: unknown): boolean {
  return hasErrno(err, INTERRUPTED_ERRNOS);
}

/** ER_NO_SUCH_TABLE: the database was never migrated (DB_MIGRATIONS_RUN=false). */
const ER_NO_SUCH_TABLE = 1146;

/** True when the session table is missing: an operator's step, not the request's fault. */
export function isSchemaMissing(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { errno?: unknown; driverError?: { errno?: unknown } };
  return e.errno === ER_NO_SUCH_TABLE || e.driverError?.errno === ER_NO_SUCH_TABLE;
}

/**
 * The one mapping of driver failures that are not the request's fault to the domain:
 * UNAVAILABLE (HTTP 503, worth a retry), for a pool too busy to queue one more statement (with
 * a Retry-After), a database out of reach, too contended, read-only or full, or that interrupted
 * the statement.
 */
export function asUnavailable(err: unknown): unknown {
  // Told apart from "unavailable": an operator reads that as MySQL down, a client as worth a wait.
  if (isPoolQueueFull(err))
    return new LoomError(
      LoomErrorCode.UNAVAILABLE,
      'the durable store is overloaded; retry in a moment',
      { retryAfterS: POOL_FULL_RETRY_AFTER_S },
    );
  if (isConnectionError(err))
    return new LoomError(LoomErrorCode.UNAVAILABLE, 'the durable store is unavailable', {
      unreachable: true,
    });
  if (isContentionError(err))
    return new LoomError(LoomErrorCode.UNAVAILABLE, 'the durable store is busy; retry');
  if (isInterrupted(err))
    return new LoomError(
      LoomErrorCode.UNAVAILABLE,
      'the durable store interrupted the statement; retry',
    );
  if (isRefusedForNow(err))
    return new LoomError(
      LoomErrorCode.UNAVAILABLE,
      'the durable store takes no writes for now (read-only or full); retry',
    );
  if (isSchemaMissing(err))
    return new LoomError(
      LoomErrorCode.UNAVAILABLE,
      'the durable store has no session table: run npm run migration:run (DB_MIGRATIONS_RUN=false)',
      { schemaMissing: true },
    );
  return err;
}

/** Whether `err`, or the driver error TypeORM wraps in it, carries one of `errnos`. */
function hasErrno(err: unknown, errnos: ReadonlySet<number>): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { errno?: unknown; driverError?: { errno?: unknown } };
  return [e.errno, e.driverError?.errno].some((n) => typeof n === 'number' && errnos.has(n));
}
