import { LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId } from '../ids';
import { AgentSession, PrivateMessage } from '../model/agent.model';
import { StateKeys } from '../model/state-keys';
import { ExecutionStatus, SharedEntry, SharedWrite, TaskSession } from '../model/task.model';
import { ListItem, SessionStore } from '../store/session-store';
import { Owner, OwnerCheckingStore } from './owner';

/** How long an agent session row may outlive a task that never closed it (the sweeper's bound). */
export const AGENT_SESSION_DURABLE_MS = 86_400_000;

/** An Idempotency-Key's entry, written before its turn's user message. */
export interface IdempotencyEntry {
  taskId: string;
  /** What the request carried, so the key cannot be reused for another request. */
  requestHash?: string;
  /** The seq the turn's user message takes; absent in entries of earlier versions. */
  userSeq?: number;
}

interface TaskRef {
  conversationId: string;
  userId: string;
}

/**
 * The task and agent layers: task sessions with their checkpoints, task-shared context (an
 * append-only log of writes, each with writer and time, folded into the current view) and
 * agents' private sessions. Everything lives in the conversation's partition.
 */
export class TaskRepository {
  constructor(private readonly store: SessionStore) {}

  async create(owner: Owner, task: TaskSession, fence?: number): Promise<void> {
    const scope = { tenantId: owner.tenantId };
    const ref: TaskRef = { conversationId: task.conversationId, userId: owner.userId };
    // The reference (GET /v1/tasks/:id) and the list entry before the task itself: a task that
    // exists (and so may be recovered) is always reachable by its id. The reference is a session
    // of its own, removed only through the list (purge): when the fenced list entry is refused
    // (a stale holder), the reference written beside it goes again.
    const [refWrite, listed] = await Promise.allSettled([
      this.store.save(scope, task.taskId, StateKeys.taskRef, ref, { userId: owner.userId }),
      this.store.append(scope, task.conversationId, StateKeys.tasks, task.taskId, { fence }),
    ]);
    if (listed.status === 'rejected') {
      if (refWrite.status === 'fulfilled')
        await this.store.delete(scope, task.taskId).catch(() => undefined);
      throw listed.reason;
    }
    if (refWrite.status === 'rejected') throw refWrite.reason;
    await this.store.save(scope, task.conversationId, StateKeys.task(task.taskId), task, { fence });
  }

  /** A checkpoint: the whole task document, written after every agent step (seed 000 pitfall 4). */
  async save(owner: Owner, task: TaskSession, fence?: number): Promise<void> {
    await this.store.save(
      { tenantId: owner.tenantId },
      task.conversationId,
      StateKeys.task(task.taskId),
      task,
      { fence },
    );
  }

  /** `consistent` skips this process's LRU (another process may have written it a moment ago). */
  async get(
    owner: Owner,
    conversationId: string,
    taskId: string,
    consistent = false,
  ): Promise<TaskSession | null> {
    assertId(taskId, 'taskId');
    const task = await this.read<TaskSession>(
      owner,
      conversationId,
      StateKeys.task(taskId),
      consistent,
    );
    return task && task.tenantId === owner.tenantId && task.userId === owner.userId ? task : null;
  }

  /** A task by id alone (GET /v1/tasks/:id): NOT_FOUND unless the caller owns it. */
  async getById(owner: Owner, taskId: string): Promise<TaskSession> {
    assertId(taskId, 'taskId');
    // Another user's reference costs the tiers a missing one does: the 404's time tells nothing.
    const ref = await (this.store as OwnerCheckingStore).get<TaskRef>(
      { tenantId: owner.tenantId },
      taskId,
      StateKeys.taskRef,
      false,
      (r) => r.userId === owner.userId,
    );
    const task =
      ref && ref.userId === owner.userId ? await this.get(owner, ref.conversationId, taskId) : null;
    if (!task) throw new LoomError(LoomErrorCode.NOT_FOUND, 'task not found');
    return task;
  }

  /** One atomic write to task-shared context; returns what it replaced (for overwrite auditing). */
  async putShared(
    owner: Owner,
    conversationId: string,
    taskId: string,
    write: SharedWrite,
  ): Promise<SharedEntry | null> {
    const previous = (await this.shared(owner, conversationId, taskId))[write.key] ?? null;
    await this.appendShared(owner, conversationId, taskId, write);
    return previous;
  }

  /**
   * The write alone, for a caller that has just read the shared context itself. `agentSessionId`:
   * an agent execution's write, made only while the task runs that execution (SUPERSEDED else).
   * Returns the write's index in the task's list of writes.
   */
  async appendShared(
    owner: Owner,
    conversationId: string,
    taskId: string,
    write: SharedWrite,
    agentSessionId?: string,
  ): Promise<number> {
    return this.store.append(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.shared(taskId),
      write,
      agentSessionId ? { execution: { taskKey: StateKeys.task(taskId), agentSessionId } } : {},
    );
  }

  /**
   * Every write to the task-shared context folded (the last write of each key wins), those of
   * executions that failed or have not succeeded yet included: what readers see is `sharedFor`.
   */
  async shared(
    owner: Owner,
    conversationId: string,
    taskId: string,
  ): Promise<Record<string, SharedEntry>> {
    return foldShared(await this.sharedWrites(owner, conversationId, taskId));
  }

  /**
   * The task-shared context as `reader` sees it (`sharedVisibleTo`): GET /v1/tasks/:id shows
   * the writes of the executions that succeeded, an agent also its own delivery's.
   */
  async sharedFor(owner: Owner, reader: SharedReader): Promise<Record<string, SharedEntry>> {
    const { conversationId, taskId } = reader.task;
    return foldShared(await this.sharedWrites(owner, conversationId, taskId), reader);
  }

  /** The task's shared writes themselves, oldest first (those after `afterIndex`, when given). */
  sharedWrites(
    owner: Owner,
    conversationId: string,
    taskId: string,
    afterIndex?: number,
  ): Promise<ListItem<SharedWrite>[]> {
    return this.store.getList<SharedWrite>(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.shared(taskId),
      afterIndex === undefined ? undefined : { afterIndex },
    );
  }

  async agentSession(
    owner: Owner,
    conversationId: string,
    agentSessionId: string,
    consistent = false,
  ): Promise<AgentSession | null> {
    assertId(agentSessionId, 'agentSessionId');
    return this.read<AgentSession>(
      owner,
      conversationId,
      StateKeys.agent(agentSessionId),
      consistent,
    );
  }

  /**
   * What an agent delivery decides on: its agent session and its task, both from the durable
   * store, as they stood at one moment where the store can (one statement in MySQL), else the
   * session first (a task closes before it drops its agent sessions).
   */
  async executionState(
    owner: Owner,
    conversationId: string,
    taskId: string,
    agentSessionId: string,
  ): Promise<{ session: AgentSession | null; task: TaskSession | null }> {
    assertId(taskId, 'taskId');
    assertId(agentSessionId, 'agentSessionId');
    const store = this.store as SessionStore & {
      getConsistent?: <T>(s: unknown, id: string, keys: string[]) => Promise<Array<T | null>>;
    };
    if (!store.getConsistent)
      return {
        session: await this.agentSession(owner, conversationId, agentSessionId, true),
        task: await this.get(owner, conversationId, taskId, true),
      };
    const [session, task] = await store.getConsistent<unknown>(
      { tenantId: owner.tenantId },
      conversationId,
      [StateKeys.agent(agentSessionId), StateKeys.task(taskId)],
    );
    const t = task as TaskSession | null;
    return {
      session: session as AgentSession | null,
      task: t && t.tenantId === owner.tenantId && t.userId === owner.userId ? t : null,
    };
  }

  /**
   * Written only while the task runs the execution: SUPERSEDED once it closed, was deleted with
   * its conversation, or recorded the execution as FAILED (it gave it up; a retry replaced it),
   * checked in the write itself. Agent sessions are removed when their task closes; the durable
   * expiry is a backstop for any left behind (the sweeper removes them).
   */
  async saveAgentSession(owner: Owner, session: AgentSession): Promise<void> {
    await this.store.save(
      { tenantId: owner.tenantId },
      session.conversationId,
      StateKeys.agent(session.agentSessionId),
      session,
      {
        expiresAt: new Date(Date.now() + AGENT_SESSION_DURABLE_MS),
        execution: {
          taskKey: StateKeys.task(session.taskId),
          agentSessionId: session.agentSessionId,
        },
      },
    );
  }

  /** The private messages of an agent session (kept in the session itself). */
  async agentMessages(
    owner: Owner,
    conversationId: string,
    agentSessionId: string,
  ): Promise<PrivateMessage[]> {
    const session = await this.agentSession(owner, conversationId, agentSessionId);
    return session?.messages ?? [];
  }

  /**
   * Seed 000 pitfall 3: agent sessions go as soon as their task completes, not only by TTL. False
   * when MySQL's rows went but Redis's copies could not be removed yet (see deleteKeys).
   */
  async removeAgentSessions(
    owner: Owner,
    conversationId: string,
    agentSessionIds: string[],
  ): Promise<boolean> {
    const scope = { tenantId: owner.tenantId };
    const keys = agentSessionIds.map((id) => StateKeys.agent(id));
    const store = this.store as SessionStore & {
      deleteKeys?: (s: typeof scope, id: string, k: string[]) => Promise<boolean>;
    };
    if (store.deleteKeys) return store.deleteKeys(scope, conversationId, keys);
    await Promise.all(keys.map((k) => this.store.deleteKey(scope, conversationId, k)));
    return true;
  }

  private read<T>(
    owner: Owner,
    sessionId: string,
    key: string,
    consistent: boolean,
  ): Promise<T | null> {
    const store = this.store as SessionStore & {
      get<V>(s: unknown, id: string, key: string, consistent?: boolean): Promise<V | null>;
    };
    return store.get<T>({ tenantId: owner.tenantId }, sessionId, key, consistent);
  }

  /**
   * What a retried request (same Idempotency-Key) already produced, if anything. Read from the
   * durable store: a cached "absent" left by the first attempt's lookup must not make the retry
   * run the turn again.
   */
  async idempotentTask(
    owner: Owner,
    conversationId: string,
    keyHash: string,
  ): Promise<IdempotencyEntry | null> {
    return this.read<IdempotencyEntry>(owner, conversationId, StateKeys.idempotency(keyHash), true);
  }

  async rememberIdempotent(
    owner: Owner,
    conversationId: string,
    keyHash: string,
    entry: IdempotencyEntry,
    fence?: number,
  ): Promise<void> {
    await this.store.save(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.idempotency(keyHash),
      entry,
      { fence },
    );
  }
}

/** Who reads the task-shared context: the task as it stands, and an agent's own delivery. */
export interface SharedReader {
  task: Pick<TaskSession, 'conversationId' | 'taskId' | 'executions'>;
  /** The reading agent's delivery: its own writes are shown to it before it succeeds. */
  delivery?: string;
}

/**
 * Whether `reader` sees `write`. An execution's writes count once it succeeded: the task
 * records it COMPLETED, and of its deliveries (a redelivery runs the handler again) only the
 * one whose result that is. A failed, cancelled or superseded attempt's writes are never shown,
 * so a half-done attempt leaves nothing in the answer; the writing delivery sees its own. A
 * write without an execution (the orchestrator's, or one stored before writes named theirs), or
 * an execution recorded without its delivery, counts as before.
 */
export function sharedVisibleTo(write: SharedWrite, reader: SharedReader): boolean {
  if (write.execution === undefined) return true;
  if (write.delivery !== undefined && write.delivery === reader.delivery) return true;
  const done = reader.task.executions.find(
    (e) => e.agentSessionId === write.execution && e.status === ExecutionStatus.COMPLETED,
  );
  if (!done) return false;
  return (
    done.delivery === undefined || write.delivery === undefined || done.delivery === write.delivery
  );
}

/**
 * Shared writes as the shared context: the last write of each key wins; with `reader`, of the
 * writes it sees (`sharedVisibleTo`). A key's `updatedAt` never goes back as it is overwritten:
 * a write is stamped before it is appended, so of two agents writing a key at the same moment
 * the one that lands last (and wins) may carry the earlier stamp; its value became current no
 * earlier than the write it replaced, whose time the key keeps then.
 */
export function foldShared(
  writes: ListItem<SharedWrite>[],
  reader?: SharedReader,
): Record<string, SharedEntry> {
  const seen = reader ? writes.filter(({ value }) => sharedVisibleTo(value, reader)) : writes;
  // A Map, then Object.fromEntries (own properties): a key named `__proto__` is a key like any other.
  const folded = new Map<string, SharedEntry>();
  for (const { value: w } of seen) {
    const before = folded.get(w.key)?.updatedAt;
    const updatedAt =
      before !== undefined && Date.parse(before) > Date.parse(w.updatedAt) ? before : w.updatedAt;
    folded.set(w.key, { value: w.value, writer: w.writer, updatedAt });
  }
  return Object.fromEntries(folded);
}
