import { EncodedValue } from '../codec';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { assertId, assertPrincipal, assertStateKey } from '../../ids';
import type {
  AppendOptions,
  ListItem,
  ListRange,
  SessionStore,
  SessionSummary,
  StoreScope,
} from '../session-store';

/**
 * Rules shared by the in-process backends (memory, JSON files): validation, fencing, list ranges
 * and the paging of listSessions. Backend-neutral, so the Redis and MySQL stores may use them too.
 */
export type SessionPage = Parameters<SessionStore['listSessions']>[2];

/**
 * How long a session's fencing counter outlives the session's deletion, or its last issue where
 * the session holds nothing else (ms): as MySQL keeps a `_fence` row alone (an hour), so a holder
 * paused across a DELETE stays fenced out when the id is locked again.
 */
export const ORPHAN_FENCE_MS = 3_600_000;

const isCount = (n: unknown): boolean => Number.isSafeInteger(n) && (n as number) >= 0;

function invalid(message: string): LoomError {
  return new LoomError(LoomErrorCode.VALIDATION_FAILED, message);
}

/** Validates the tenant id of a scope (a principal id); INVALID_ID otherwise. */
export function assertScope(scope: StoreScope): void {
  assertPrincipal(scope?.tenantId, 'tenantId');
}

/** Validates the tenant, the session id and (when given) the state key; INVALID_ID otherwise. */
export function assertTarget(scope: StoreScope, sessionId: unknown, key?: unknown): void {
  assertScope(scope);
  assertId(sessionId, 'sessionId');
  if (key !== undefined) assertStateKey(key);
}

/** Validates the options of a write (the ids in them, the fence, an explicit list index). */
export function assertWriteOptions(opts: AppendOptions): void {
  if (opts.userId !== undefined) assertPrincipal(opts.userId, 'userId');
  if (opts.fence !== undefined && !Number.isSafeInteger(opts.fence))
    throw invalid('fence must be an integer');
  if (opts.index !== undefined && !(isCount(opts.index) && opts.index >= 1)) {
    throw invalid('index must be an integer >= 1');
  }
  if (opts.execution !== undefined) {
    if (opts.fence !== undefined) throw invalid('a write has a fence or an execution, not both');
    assertStateKey(opts.execution?.taskKey);
    assertId(opts.execution.agentSessionId, 'agentSessionId');
  }
}

/**
 * SUPERSEDED unless `task` (the JSON value of the guard's task key, null when absent) is RUNNING
 * and has not recorded the execution as FAILED (see WriteOptions.execution).
 */
export function checkExecution(task: unknown, agentSessionId: string): void {
  const t = task as { status?: unknown; executions?: Array<Record<string, unknown>> } | null;
  const givenUp = (t?.executions ?? []).some(
    (e) => e?.agentSessionId === agentSessionId && e?.status === 'FAILED',
  );
  if (t?.status !== 'RUNNING' || givenUp) throw executionSuperseded();
}

export function executionSuperseded(): LoomError {
  return new LoomError(
    LoomErrorCode.SUPERSEDED,
    'its task no longer runs this execution: nothing more is written',
  );
}

/** Validates a listSessions page (limit, cursor, user filter). */
export function assertPage(page: SessionPage): void {
  if (!isCount(page?.limit)) throw invalid('limit must be an integer >= 0');
  if (page.userId !== undefined) assertPrincipal(page.userId, 'userId');
  if (page.before !== undefined) {
    assertId(page.before.sessionId, 'before.sessionId');
    if (!(page.before.updatedAt instanceof Date) || isNaN(page.before.updatedAt.getTime())) {
      throw invalid('before.updatedAt must be a valid Date');
    }
  }
}

/** A session of another tenant reads as absent, and writing to it fails as if it did not exist. */
export function sessionNotFound(): LoomError {
  return new LoomError(LoomErrorCode.NOT_FOUND, 'session not found');
}

export function indexTaken(index: number): LoomError {
  return new LoomError(LoomErrorCode.CONFLICT, `list index ${index} is taken`, { index });
}

/** STALE_FENCING_TOKEN unless `fence` is absent (unfenced write) or the current token. */
export function checkFence(current: number, fence: number | undefined): void {
  if (fence !== undefined && fence !== current) {
    throw new LoomError(LoomErrorCode.STALE_FENCING_TOKEN, 'fencing token is not the current one');
  }
}

/** JSON text of a value; VALIDATION_FAILED for what JSON cannot hold (undefined, functions, BigInt). */
export function toJson(value: unknown): string {
  if (value instanceof EncodedValue) return value.json;
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    throw invalid('value is not serialisable as JSON');
  }
  if (text === undefined) throw invalid('value is not serialisable as JSON');
  return text;
}

/** VALIDATION_FAILED unless every bound of the range is an integer >= 0 (every backend). */
export function assertRange(range: ListRange = {}): void {
  for (const n of [range.afterIndex, range.last, range.limit]) {
    if (n !== undefined && !isCount(n)) throw invalid('list range bounds must be integers >= 0');
  }
}

/** A copy of a value as its JSON text holds it (a Date becomes its ISO string, undefined goes). */
export function jsonCopy<T>(value: T): T {
  return JSON.parse(toJson(value)) as T;
}

/** Applies afterIndex, then last, then limit to items sorted by index. */
export function applyRange<T>(items: ListItem<T>[], range: ListRange = {}): ListItem<T>[] {
  const { afterIndex, last, limit } = range;
  assertRange(range);
  let out = afterIndex === undefined ? items : items.filter((item) => item.index > afterIndex);
  if (last !== undefined) out = last === 0 ? [] : out.slice(-last);
  if (limit !== undefined) out = out.slice(0, limit);
  return out;
}

type Cursor = { updatedAt: Date; sessionId: string };

/** Negative when `a` lists before `b`: newer updatedAt first, then the greater sessionId. */
function newestFirst(a: Cursor, b: Cursor): number {
  const byTime = b.updatedAt.getTime() - a.updatedAt.getTime();
  return byTime !== 0 ? byTime : a.sessionId < b.sessionId ? 1 : a.sessionId > b.sessionId ? -1 : 0;
}

/** Newest first; `before` is a keyset cursor (the last row of the previous page); user filter. */
export function pageSessions(rows: SessionSummary[], page: SessionPage): SessionSummary[] {
  const { before, userId } = page;
  return rows
    .filter((row) => userId === undefined || row.userId === userId)
    .filter((row) => before === undefined || newestFirst(row, before) > 0)
    .sort(newestFirst)
    .slice(0, page.limit);
}
