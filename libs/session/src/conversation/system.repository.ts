import { SessionStore } from '../store/session-store';

/** The tenant of Loom's own bookkeeping sessions; never a conversation's. */
export const SYSTEM_TENANT = '_system';
/** Ids with this prefix are system sessions: a client can never create a conversation under one. */
export const SYSTEM_ID_PREFIX = '_sys_';
/** Sessions the sweeper and the recovery scheduler lock or read. */
export const SystemSessions = {
  runs: `${SYSTEM_ID_PREFIX}task-runs`,
  catalog: `${SYSTEM_ID_PREFIX}agent-catalog`,
  sweeper: `${SYSTEM_ID_PREFIX}sweeper`,
  /** The deployment (LOOM_KEY_PREFIX) the database belongs to. */
  deployment: `${SYSTEM_ID_PREFIX}deployment`,
} as const;

export function isSystemId(id: string): boolean {
  return id.startsWith(SYSTEM_ID_PREFIX);
}

/** A task that may be RUNNING: what recovery needs to find and lock it without scanning keys. */
export interface RunEntry {
  taskId: string;
  tenantId: string;
  userId: string;
  conversationId: string;
  /** The orchestrator instance working on it. */
  owner: string;
  /** Its conversation-lock token: a recoverer may take over exactly this lock once the lease expired. */
  lockToken: string | null;
  /**
   * That lock's fencing token: an owner that paused past its lock removes the entry only while
   * no later owner (a retry, a recovery: a newer fence) has written it. Absent in entries written
   * before it was recorded.
   */
  fence?: number;
  createdAt: string;
  /**
   * The correlation id of the turn (or retry) that started the work: a recovery of the task runs
   * under it, so its lines and its agent calls are found by the turn's id. Absent in entries
   * written before it was recorded (a recovery then gets an id of its own).
   */
  correlationId?: string;
}

/** A store that removes a run entry only while its `fence` is not newer, in one statement. */
interface FencedRunRemoval {
  deleteValueUpToFence(
    scope: { tenantId: string },
    sessionId: string,
    key: string,
    fence: number,
  ): Promise<void>;
}

const RUN_PREFIX = 'run:';
/** Run-index entries a scan reads in parallel: a few of the pool's connections, not its queue. */
const RUN_READS_AT_ONCE = 8;
const scope = { tenantId: SYSTEM_TENANT };

/**
 * Loom's system sessions. The run index is one session whose value keys are `run:<taskId>`:
 * written before a task's first write, removed after its last, so a scan reads only the tasks
 * that may need recovery (one row each), never the keyspace. It lives in the durable store alone
 * (a tiered store's `durable`): only recovery reads it, and a cached copy would only cost a Redis
 * write per turn.
 */
export class SystemRepository {
  private readonly runStore: SessionStore;

  constructor(private readonly store: SessionStore) {
    this.runStore = (store as SessionStore & { durable?: SessionStore }).durable ?? store;
  }

  async saveRun(entry: RunEntry): Promise<void> {
    await this.runStore.save(scope, SystemSessions.runs, RUN_PREFIX + entry.taskId, entry);
  }

  /**
   * Removes the task's entry; with `fence` (the remover's lock), only while the entry's fence is
   * not newer than it (or it has none): a worker that paused past its lock, cleaning up late,
   * then leaves alone the entry of the retry or recovery that took the task on after it, which
   * the scan would otherwise never find again should that owner die.
   */
  async removeRun(taskId: string, fence?: number): Promise<void> {
    const key = RUN_PREFIX + taskId;
    if (fence === undefined) return this.runStore.deleteKey(scope, SystemSessions.runs, key);
    const fenced = this.runStore as SessionStore & Partial<FencedRunRemoval>;
    if (fenced.deleteValueUpToFence)
      return fenced.deleteValueUpToFence(scope, SystemSessions.runs, key, fence);
    // Without it (the embedded profile's stores: one process, its locks in memory), read first.
    const entry = await this.runStore.get<RunEntry>(scope, SystemSessions.runs, key);
    if (entry && (entry.fence ?? 0) <= fence)
      await this.runStore.deleteKey(scope, SystemSessions.runs, key);
  }

  async run(taskId: string): Promise<RunEntry | null> {
    return this.runStore.get<RunEntry>(scope, SystemSessions.runs, RUN_PREFIX + taskId);
  }

  /**
   * Up to `limit` entries of the run index in task id order, from the first after `afterTaskId`
   * on, wrapping around to the start (each at most once): a scanner that passes the last task id
   * it read reaches every entry in turn, however many the index holds. Read a few at a time: the
   * index can hold more entries than the connection pool queues (1000), and a scan that asked
   * for all at once would fail, and fail the statements of turns queued beside it.
   */
  async runs(limit: number, afterTaskId?: string): Promise<RunEntry[]> {
    const all = (await this.runStore.listSessionKeys(scope, SystemSessions.runs))
      .filter((k) => k.startsWith(RUN_PREFIX))
      .sort();
    const after =
      afterTaskId === undefined ? 0 : all.findIndex((k) => k > RUN_PREFIX + afterTaskId);
    const from = after < 0 ? 0 : after;
    const keys = [...all.slice(from), ...all.slice(0, from)].slice(0, limit);
    const entries: Array<RunEntry | null> = [];
    for (let i = 0; i < keys.length; i += RUN_READS_AT_ONCE)
      entries.push(
        ...(await Promise.all(
          keys
            .slice(i, i + RUN_READS_AT_ONCE)
            .map((k) => this.runStore.get<RunEntry>(scope, SystemSessions.runs, k)),
        )),
      );
    return entries.filter((e): e is RunEntry => e !== null);
  }

  async value<T>(session: string, key: string): Promise<T | null> {
    return this.store.get<T>(scope, session, key);
  }

  async saveValue(session: string, key: string, value: unknown): Promise<void> {
    await this.store.save(scope, session, key, value);
  }
}
