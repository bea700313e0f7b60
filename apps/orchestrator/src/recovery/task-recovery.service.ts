import { Injectable, Logger } from '@nestjs/common';
import {
  ConversationLock,
  ConversationRepository,
  newId,
  RunEntry,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { pickMdc, runWithMdc } from '@loom/observability';
import { TaskResumer } from '../turn/task-resumer';
import { TaskLeases } from '../turn/task-run';

/**
 * Entries of the run index one scan looks at, and tasks this process recovers at most at a time
 * (each recovery waits for whatever agent work its task still has, up to AGENT_MAX_EXECUTION_MS).
 */
const SCAN_LIMIT = 10_000;
const RECOVER_LIMIT = 50;

export interface ScanReport {
  indexed: number;
  due: number;
  recovered: number;
}

/**
 * The recovery scan (seed 000's TaskRecoveryService, done across replicas): reads the run index,
 * and for every task whose lease ran out takes its conversation lock — free, or still held by
 * the dead worker's token — and resumes it. The lock's atomic take-over is what makes exactly one
 * replica recover a task; its new fence shuts out the former worker should it wake up.
 */
@Injectable()
export class TaskRecovery {
  private readonly log = new Logger('TaskRecovery');

  constructor(
    private readonly system: SystemRepository,
    private readonly tasks: TaskRepository,
    private readonly conversations: ConversationRepository,
    private readonly lock: ConversationLock,
    private readonly leases: TaskLeases,
    private readonly resumer: TaskResumer,
  ) {}

  /** Entries of the run index one scan reads (SCAN_LIMIT; tests lower it). */
  scanLimit = SCAN_LIMIT;
  /**
   * The last task id the previous scan read: the next one reads on from there, so an index
   * longer than one scan's window is read whole in turn (its first entries, all live, would
   * otherwise hide the due ones after them for good).
   */
  private scannedTo?: string;

  /** Recoveries under way in this process, by task id (a later scan leaves those alone). */
  private readonly recovering = new Set<string>();

  /** A scan, and every recovery it starts, to their end. */
  async scan(): Promise<ScanReport> {
    const { finished } = await this.start();
    return finished;
  }

  /**
   * Reads the index and starts recovering the tasks that are due; resolves once they are
   * started (`finished`: once they have ended). A recovery lasts as long as its task's agent
   * work still left, so the scheduler's next scan must not wait for it: a task interrupted
   * meanwhile is due after its lease, whatever other tasks' agents are still doing.
   */
  async start(): Promise<{ indexed: number; due: number; finished: Promise<ScanReport> }> {
    const entries = await this.system.runs(this.scanLimit, this.scannedTo);
    const started: Promise<boolean>[] = [];
    for (const entry of entries) {
      if (this.recovering.size >= RECOVER_LIMIT) break; // the next scan reads on from here
      this.scannedTo = entry.taskId;
      if (this.recovering.has(entry.taskId)) continue;
      if (!(await this.due(entry).catch(() => false))) continue;
      const recovery = this.recover(entry).finally(() => this.recovering.delete(entry.taskId));
      this.recovering.add(entry.taskId);
      started.push(recovery);
    }
    const finished = Promise.all(started).then((results) => ({
      indexed: entries.length,
      due: started.length,
      recovered: results.filter(Boolean).length,
    }));
    return { indexed: entries.length, due: started.length, finished };
  }

  /**
   * Recovers one task in a CLS context of its own; false when it was busy, renewed or failed. The
   * context's correlation id is the one of the turn that started the task (its run-index entry
   * recorded it), so the recovery's lines and agent calls are found by the turn's id; a new
   * `r_…` id for an entry written before ids were recorded.
   */
  recover(entry: RunEntry): Promise<boolean> {
    const { tenantId, userId, conversationId, taskId } = entry;
    const correlationId = pickMdc(entry).correlationId ?? newId('r');
    const fields = { correlationId, tenantId, userId, conversationId, taskId };
    return runWithMdc(fields, async () => {
      try {
        return await this.recoverLocked(entry);
      } catch (err) {
        this.log.warn(`recovery of ${entry.taskId} failed: ${(err as Error).message}`);
        return false;
      }
    });
  }

  private async recoverLocked(entry: RunEntry): Promise<boolean> {
    const { tenantId, userId, conversationId, taskId } = entry;
    // The cheap check read Redis; decide on what MySQL holds before disturbing anyone.
    await this.conversations.refresh(conversationId);
    const due = await this.due(entry);
    if (!due) return false;
    // A task no longer RUNNING has no lease to say its holder is gone, and one acquisition can
    // carry two tasks (a turn resumes this one, then runs its own under the same token): while
    // that token is the lock of a live process, the entry waits for the lock to be free.
    if (
      due === 'closed' &&
      entry.lockToken &&
      (await this.lock.heldAlive(conversationId, entry.lockToken))
    )
      return false;
    const lock = await this.lock.takeOver({ tenantId }, conversationId, entry.lockToken);
    if (!lock) return false; // another turn or replica holds the conversation: it settles the task
    const started = Date.now();
    try {
      const task = await this.resumer.resume({ tenantId, userId }, conversationId, taskId, lock);
      this.log.log(
        `recovered ${taskId} (${task?.status ?? 'gone'}) in ${Date.now() - started} ms, ` +
          `lease owner was ${entry.owner}`,
      );
      return true;
    } finally {
      await lock.release();
    }
  }

  /**
   * Its worker stopped: the lease ran out (`expired`), or the task was closed (or never written)
   * and not cleaned up a lease's time after (`closed`); false when not due.
   */
  private async due(entry: RunEntry): Promise<'expired' | 'closed' | false> {
    const owner = { tenantId: entry.tenantId, userId: entry.userId };
    const task = await this.tasks.get(owner, entry.conversationId, entry.taskId, true);
    const now = this.leases.now();
    const grace = this.leases.leaseMs;
    if (task?.status === TaskStatus.RUNNING) return this.leases.expired(task, now) && 'expired';
    const since = Date.parse(task?.completedAt ?? entry.createdAt);
    return since + grace <= now && 'closed';
  }
}
