import { assertStateKey } from '../../ids';
import type {
  AppendOptions,
  ListItem,
  ListRange,
  SessionStore,
  SessionSummary,
  StoreScope,
  WriteOptions,
} from '../session-store';
import * as rules from './store-rules';

interface MemorySession {
  tenantId: string;
  fence: number;
  /** Set while the session holds nothing but its fence (deleted, or only locked): ms it lapses. */
  fenceExpiresAt?: number;
  values: Map<string, { value: unknown; updatedAt: Date; userId: string | null }>;
  lists: Map<string, { items: Map<number, unknown>; last: number }>;
}

/**
 * The Session API in process memory (tests, single-process scratch use). Values are copied in and
 * out through their JSON text, as the other backends store them; ttlSeconds and expiresAt are not
 * applied. Every method is synchronous inside, so
 * concurrent calls cannot interleave. A deleted session leaves its owner and fencing counter for
 * an hour (ORPHAN_FENCE_MS), as MySQL does; `now` is the clock that expiry is read on (tests).
 */
export class MemorySessionStore implements SessionStore {
  readonly kind = 'memory';
  private readonly sessions = new Map<string, MemorySession>();
  private readonly now: () => number;

  constructor(opts: { now?: () => number } = {}) {
    this.now = opts.now ?? Date.now;
  }

  async save(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<void> {
    const copy = this.checkWrite(scope, sessionId, key, value, opts);
    const session = this.claim(scope, sessionId);
    const userId = opts.userId ?? session.values.get(key)?.userId ?? null;
    session.values.set(key, { value: copy, updatedAt: new Date(), userId });
  }

  async create(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<boolean> {
    rules.assertTarget(scope, sessionId, key);
    rules.assertWriteOptions(opts);
    const session = this.live(sessionId);
    // A stale holder is told so before it learns whether the key exists (as MySQL answers).
    if (session?.tenantId === scope.tenantId) rules.checkFence(session.fence, opts.fence);
    if (session?.values.has(key)) return false;
    await this.save(scope, sessionId, key, value, opts);
    return true;
  }

  async get<T>(scope: StoreScope, sessionId: string, key: string): Promise<T | null> {
    const entry = this.readable(scope, sessionId, key)?.values.get(key);
    return entry ? rules.jsonCopy(entry.value as T) : null;
  }

  async append(
    scope: StoreScope,
    sessionId: string,
    key: string,
    item: unknown,
    opts: AppendOptions = {},
  ): Promise<number> {
    const copy = this.checkWrite(scope, sessionId, key, item, opts);
    const list = this.live(sessionId)?.lists.get(key);
    const index = opts.index ?? (list?.last ?? 0) + 1;
    if (list?.items.has(index)) throw rules.indexTaken(index);
    const session = this.claim(scope, sessionId);
    const target = session.lists.get(key) ?? { items: new Map<number, unknown>(), last: 0 };
    target.items.set(index, copy);
    target.last = Math.max(target.last, index);
    session.lists.set(key, target);
    return index;
  }

  async getList<T>(
    scope: StoreScope,
    sessionId: string,
    key: string,
    range?: ListRange,
  ): Promise<ListItem<T>[]> {
    const items =
      this.readable(scope, sessionId, key)?.lists.get(key)?.items ?? new Map<number, unknown>();
    const sorted = [...items].sort(([a], [b]) => a - b).map(([index, value]) => ({ index, value }));
    return rules
      .applyRange(sorted, range)
      .map(({ index, value }) => ({ index, value: rules.jsonCopy(value as T) }));
  }

  /** The last index of the list (equal to its length while indexes are contiguous); 0 when absent. */
  async listLength(scope: StoreScope, sessionId: string, key: string): Promise<number> {
    return this.readable(scope, sessionId, key)?.lists.get(key)?.last ?? 0;
  }

  async exists(scope: StoreScope, sessionId: string): Promise<boolean> {
    return this.keysOf(this.readable(scope, sessionId)).length > 0;
  }

  async listSessionKeys(scope: StoreScope, sessionId: string): Promise<string[]> {
    return this.keysOf(this.readable(scope, sessionId)).sort();
  }

  async deleteKey(scope: StoreScope, sessionId: string, key: string): Promise<void> {
    const session = this.readable(scope, sessionId, key);
    session?.values.delete(key);
    session?.lists.delete(key);
  }

  /**
   * Removes the session, all but its owner and fencing counter (another tenant's session: no-op; a
   * session never fenced: all of it):
   * a holder paused across the deletion stays fenced out when the id is locked again. Those lapse
   * an hour later unless the session is written again.
   */
  async delete(scope: StoreScope, sessionId: string): Promise<void> {
    const session = this.readable(scope, sessionId);
    if (!session) return;
    // No counter to keep (never locked): nothing stays, as MySQL keeps no row then.
    if (session.fence === 0) {
      this.sessions.delete(sessionId);
      return;
    }
    session.values.clear();
    session.lists.clear();
    session.fenceExpiresAt = this.now() + rules.ORPHAN_FENCE_MS;
  }

  async listSessions(
    scope: StoreScope,
    key: string,
    page: rules.SessionPage,
  ): Promise<SessionSummary[]> {
    rules.assertScope(scope);
    assertStateKey(key);
    rules.assertPage(page);
    const rows: SessionSummary[] = [];
    for (const [sessionId, session] of this.sessions) {
      const entry = session.tenantId === scope.tenantId ? session.values.get(key) : undefined;
      if (entry)
        rows.push({ sessionId, userId: entry.userId, updatedAt: new Date(entry.updatedAt) });
    }
    return rules.pageSessions(rows, page);
  }

  async nextFence(scope: StoreScope, sessionId: string): Promise<number> {
    this.checkWrite(scope, sessionId, undefined, null, {});
    const session = this.claim(scope, sessionId);
    // A fence issued where the session holds nothing else lapses an hour after (as in MySQL).
    if (this.keysOf(session).length === 0)
      session.fenceExpiresAt = this.now() + rules.ORPHAN_FENCE_MS;
    return ++session.fence;
  }

  async close(): Promise<void> {
    this.sessions.clear();
  }

  // Validates a write, checks owner and fence; returns the copy of the value to store.
  private checkWrite(
    scope: StoreScope,
    sessionId: string,
    key: string | undefined,
    value: unknown,
    opts: AppendOptions,
  ): unknown {
    rules.assertTarget(scope, sessionId, key);
    rules.assertWriteOptions(opts);
    const session = this.live(sessionId);
    if (session && session.tenantId !== scope.tenantId) throw rules.sessionNotFound();
    rules.checkFence(session?.fence ?? 0, opts.fence);
    if (opts.execution) {
      const task = session?.values.get(opts.execution.taskKey)?.value ?? null;
      rules.checkExecution(task, opts.execution.agentSessionId);
    }
    return rules.jsonCopy(value);
  }

  // The session, created and owned by the scope's tenant on its first write; one that held only
  // its fence holds a value again, so its fence no longer lapses.
  private claim(scope: StoreScope, sessionId: string): MemorySession {
    let session = this.live(sessionId);
    if (!session) {
      session = { tenantId: scope.tenantId, fence: 0, values: new Map(), lists: new Map() };
      this.sessions.set(sessionId, session);
    }
    session.fenceExpiresAt = undefined;
    return session;
  }

  // The session, unless it held nothing but a fence that has lapsed (then it is gone).
  private live(sessionId: string): MemorySession | undefined {
    const session = this.sessions.get(sessionId);
    if (session?.fenceExpiresAt !== undefined && session.fenceExpiresAt <= this.now()) {
      this.sessions.delete(sessionId);
      return undefined;
    }
    return session;
  }

  // Validates the ids, then returns the session if the scope's tenant owns it.
  private readable(scope: StoreScope, sessionId: string, key?: string): MemorySession | undefined {
    rules.assertTarget(scope, sessionId, key);
    const session = this.live(sessionId);
    return session?.tenantId === scope.tenantId ? session : undefined;
  }

  private keysOf(session: MemorySession | undefined): string[] {
    return session ? [...new Set([...session.values.keys(), ...session.lists.keys()])] : [];
  }
}
