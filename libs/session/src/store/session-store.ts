/**
 * The Session API of seed 003, scoped by tenant. One implementation per backend
 * (MySQL, Redis, JSON files, in-memory) and one tiered composition (LRU → Redis → MySQL);
 * a single contract suite (session-store.contract.ts) runs against each.
 *
 * A session is a conversation: every state key of a conversation (its messages, tasks,
 * agent sessions) lives under its id, so one conversation is one partition everywhere.
 */
export interface StoreScope {
  /** Every read and write is limited to this tenant; another tenant's data reads as absent. */
  tenantId: string;
}

export interface ListItem<T = unknown> {
  index: number;
  value: T;
}

export interface ListRange {
  /** Only items with index > afterIndex. */
  afterIndex?: number;
  /** Only the last N items (applied after afterIndex). */
  last?: number;
  /** At most this many items, from the start of the remaining range. */
  limit?: number;
}

export interface WriteOptions {
  /** Hot-tier time to live for this key, in seconds (ignored by durable backends). */
  ttlSeconds?: number;
  /** Durable expiry of the row; a sweeper removes rows past it. */
  expiresAt?: Date | null;
  /** Owner recorded with the row (for listing a user's sessions). */
  userId?: string;
  /** Reject the write with STALE_FENCING_TOKEN unless this is the session's current fencing token. */
  fence?: number;
  /**
   * A write of an agent execution: made only while the session's task `taskKey` is RUNNING and
   * has not recorded `agentSessionId` as FAILED (it gave the execution up, or a retry replaced
   * it), else SUPERSEDED and nothing is written; checked by the write itself, so a task closed,
   * failed or deleted (with its conversation) just before it is never written beside.
   */
  execution?: ExecutionGuard;
}

export interface ExecutionGuard {
  taskKey: string;
  agentSessionId: string;
}

export interface AppendOptions extends WriteOptions {
  /** Write at exactly this index; CONFLICT if it is taken. Without it: the next index (max + 1, from 1). */
  index?: number;
}

export interface SessionSummary {
  sessionId: string;
  userId: string | null;
  updatedAt: Date;
}

export interface SessionStore {
  readonly kind: string;
  /** Sets a single value (item_index 0), replacing any previous one. */
  save(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts?: WriteOptions,
  ): Promise<void>;
  /** Sets a single value only if the key is absent in the whole store; false when it exists (for any tenant). */
  create(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts?: WriteOptions,
  ): Promise<boolean>;
  get<T>(scope: StoreScope, sessionId: string, key: string): Promise<T | null>;
  /** Appends one item to a list; returns its index (contiguous from 1). One write, whatever the list's length. */
  append(
    scope: StoreScope,
    sessionId: string,
    key: string,
    item: unknown,
    opts?: AppendOptions,
  ): Promise<number>;
  /** Items of a list in index order. */
  getList<T>(
    scope: StoreScope,
    sessionId: string,
    key: string,
    range?: ListRange,
  ): Promise<ListItem<T>[]>;
  /** Number of items and the last index of a list (0 when empty). */
  listLength(scope: StoreScope, sessionId: string, key: string): Promise<number>;
  exists(scope: StoreScope, sessionId: string): Promise<boolean>;
  /** The state keys a session holds (its `_keys` index). */
  listSessionKeys(scope: StoreScope, sessionId: string): Promise<string[]>;
  /** Removes one state key (value or whole list). */
  deleteKey(scope: StoreScope, sessionId: string, key: string): Promise<void>;
  /** Removes a whole session. */
  delete(scope: StoreScope, sessionId: string): Promise<void>;
  /** The tenant's sessions that hold the single value `key`, newest write of it first. */
  listSessions(
    scope: StoreScope,
    key: string,
    page: { limit: number; before?: { updatedAt: Date; sessionId: string }; userId?: string },
  ): Promise<SessionSummary[]>;
  /** Issues the next fencing token of a session (strictly increasing, durable). */
  nextFence(scope: StoreScope, sessionId: string): Promise<number>;
  close(): Promise<void>;
}
