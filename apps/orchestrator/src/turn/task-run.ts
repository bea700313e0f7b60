import { Inject, Injectable, Logger } from '@nestjs/common';
import { AsyncResource } from 'async_hooks';
import { randomBytes } from 'crypto';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { currentMdc } from '@loom/observability';
import {
  LockHandle,
  Owner,
  RunEntry,
  SESSION_OPTIONS,
  SessionOptions,
  SharedClock,
  TaskRepository,
  TaskSession,
} from '@loom/session';
import { shutdownRefusal } from '../lifecycle/shutdown-refusal';

/** This orchestrator process, as named in the leases it holds. */
export const ORCHESTRATOR_ID = Symbol('ORCHESTRATOR_ID');
export const orchestratorIdProvider = {
  provide: ORCHESTRATOR_ID,
  useFactory: () => `orchestrator-${randomBytes(6).toString('hex')}`,
};

/**
 * One task being worked on under a conversation lock. Every write of the task document goes
 * through `checkpoint()`, one after another, each with a fresh lease (owner, expiresAt) and the
 * lock's fence; a timer renews lease and lock every min(lease, lock TTL) / 3 while agents work.
 * A holder that lost its lock finds its next fenced write refused (STALE_FENCING_TOKEN).
 *
 * On shutdown a run still working is handed over (`handOver()`): it stops writing, ends its
 * lease at once with a last fenced write and releases the lock, so another replica resumes the
 * task from that checkpoint; its caller gets UNAVAILABLE.
 */
export class TaskRun {
  /** Set by a streaming (SSE) turn: receives the reply's text as the answering agent writes it. */
  onDelta?: (agentType: string, text: string) => void;
  private chain: Promise<void> = Promise.resolve();
  private timer?: NodeJS.Timeout;
  private closed = false;
  /** The agents' work is over (or was given up): completion writes follow, not a hand-over. */
  private settled = false;
  private handedOver = false;
  private abandon: (err: Error) => void = () => undefined;
  private readonly abandoned = new Promise<never>((_, reject) => (this.abandon = reject));
  /**
   * Runs `fn` in the context the run was opened in (CLS: the turn's or the recovery's ids), for
   * what the shutdown does to it from its own: the lines of a hand-over name the task's turn.
   */
  readonly inContext = AsyncResource.bind(<T>(fn: () => T): T => fn());

  constructor(
    readonly owner: Owner,
    readonly task: TaskSession,
    readonly lock: LockHandle,
    private readonly opts: {
      tasks: TaskRepository;
      renewEveryMs: number;
      instanceId: string;
      log: Logger;
      /** When a lease taken now ends (epoch ms): TASK_LEASE_MS on, or the shutdown's cap. */
      leaseEnd: () => number;
      /** Now on the clock leases are written and read by (SharedClock). */
      now: () => number;
      onStop: (run: TaskRun) => void;
    },
  ) {
    this.abandoned.catch(() => undefined);
  }
  /** Now on the clock leases are written and read by (SharedClock): for the times a scan reads. */
  now(): number {
    return this.opts.now();
  }

  start(): this {
    this.timer = setInterval(() => void this.renew(), this.opts.renewEveryMs);
    this.timer.unref();
    return this;
  }

  /** Saves the task as it is now, with a lease running from now, after every earlier write. */
  checkpoint(): Promise<void> {
    return this.enqueue(() => {
      const expiresAt = this.opts.leaseEnd();
      this.task.lease = {
        owner: this.opts.instanceId,
        expiresAt: new Date(expiresAt).toISOString(),
      };
    });
  }

  /** `work` (the agents' part of the task), or UNAVAILABLE as soon as the run is handed over. */
  async guard<T>(work: Promise<T>): Promise<T> {
    try {
      return await Promise.race([work, this.abandoned]);
    } finally {
      this.settled = true;
    }
  }

  /**
   * Gives the task up (this process is shutting down): nothing more is written, the lease ends
   * now (the last write, fenced), the lock is released, and `guard()` rejects with UNAVAILABLE.
   * A run whose agents are done finishes instead (false). Whatever its agents still do is
   * idempotent by agentSessionId: the replica that resumes the task gets their results.
   */
  handOver(): Promise<boolean> {
    return this.inContext(() => this.giveUp());
  }

  private async giveUp(): Promise<boolean> {
    if (this.settled || this.closed) return false;
    this.handedOver = true;
    this.stop();
    const last = this.enqueue(() => {
      this.task.lease = {
        owner: this.opts.instanceId,
        expiresAt: new Date(this.opts.now()).toISOString(),
      };
    });
    this.closed = true;
    try {
      await last;
    } catch (err) {
      // Refused by the fence: another replica already took the task over.
      this.opts.log.warn(`hand-over of ${this.task.taskId}: ${(err as Error).message}`);
    }
    await this.lock.release().catch(() => undefined);
    this.opts.log.log(`handed ${this.task.taskId} over: this orchestrator is shutting down`);
    this.abandon(
      shutdownRefusal(
        'this orchestrator is shutting down; another replica finishes the turn: retry with the same Idempotency-Key',
      ),
    );
    return true;
  }

  /** The last write: the task leaves RUNNING and gives its lease up. */
  close(): Promise<void> {
    this.stop();
    const last = this.enqueue(() => {
      this.task.lease = null;
    });
    this.closed = true;
    return last;
  }

  stop(): void {
    clearInterval(this.timer);
    this.opts.onStop(this);
  }

  private enqueue(prepare: () => void): Promise<void> {
    // Handed over: the next wave is not dispatched, the task not written by this process again.
    if (this.closed && this.handedOver)
      return Promise.reject(shutdownRefusal('the task was handed over'));
    if (this.closed) return Promise.resolve();
    const write = this.chain.then(() => {
      prepare();
      return this.opts.tasks.save(this.owner, this.task, this.lock.fence);
    });
    this.chain = write.catch(() => undefined);
    return write;
  }

  private async renew(): Promise<void> {
    await this.lock.renew();
    await this.checkpoint().catch((err) =>
      this.opts.log.warn(`lease renewal of ${this.task.taskId} failed: ${err.message}`),
    );
  }
}

/**
 * The lease writes of a shutdown (cap, hand-over) in flight at once: a replica may hold more
 * open turns than the MySQL pool queues (1000), and a write past the queue fails at once.
 */
const RUN_WRITES_AT_ONCE = 16;

/** `fn` on every item, at most `limit` running at a time; the results in the items' order. */
async function atMostAtOnce<T, R>(
  items: T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/**
 * Opens TaskRuns with this process's id, lease length and renewal cadence, and keeps the open
 * ones so that a shutdown can cap their leases and hand over those it cannot wait for.
 *
 * A lease's end is written by one replica and read by the others: both on the SharedClock
 * (Redis's time), never on a host's own, which may be minutes off (a reader ahead would take a
 * live worker's task over; a writer behind would write leases already over for everyone).
 */
@Injectable()
export class TaskLeases {
  private readonly log = new Logger('TaskLease');
  private readonly runs = new Set<TaskRun>();
  private cap = Infinity;
  private handingOver = false;

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    @Inject(ORCHESTRATOR_ID) readonly instanceId: string,
    @Inject(SESSION_OPTIONS) private readonly session: SessionOptions,
    private readonly tasks: TaskRepository,
    private readonly clock: SharedClock,
  ) {}

  /** Now on the clock leases are written and read by (epoch ms). */
  now(): number {
    return this.clock.now();
  }

  get leaseMs(): number {
    return this.env.TASK_LEASE_MS;
  }

  /** When a lease taken now ends: TASK_LEASE_MS from now, or the shutdown's cap if earlier. */
  leaseEnd(now = this.now()): number {
    return Math.min(now + this.env.TASK_LEASE_MS, this.cap);
  }

  open(owner: Owner, task: TaskSession, lock: LockHandle): TaskRun {
    const renewEveryMs = Math.max(
      100,
      Math.floor(Math.min(this.env.TASK_LEASE_MS, this.session.lockTtlMs) / 3),
    );
    const run = new TaskRun(owner, task, lock, {
      tasks: this.tasks,
      renewEveryMs,
      instanceId: this.instanceId,
      log: this.log,
      leaseEnd: () => this.leaseEnd(),
      now: () => this.now(),
      onStop: (r) => this.runs.delete(r),
    });
    this.runs.add(run);
    // Opened after the hand-over (a turn that was waiting for its lock): handed over at once.
    if (this.handingOver) void run.handOver();
    return run;
  }

  /** This process hands its runs over (it is shutting down): a run opened now is at once. */
  get handingOverNow(): boolean {
    return this.handingOver;
  }

  /** The runs this process is working on now. */
  running(): TaskRun[] {
    return [...this.runs];
  }

  /**
   * From now on no lease of this process runs past `until` (on `now()`'s clock): every open run checkpoints at once
   * with the shorter lease, so a kill before the hand-over leaves its tasks due by `until`.
   */
  async capLeases(until: number): Promise<void> {
    this.cap = until;
    await atMostAtOnce(this.running(), RUN_WRITES_AT_ONCE, (run) =>
      run.inContext(() =>
        run.checkpoint().catch((err) => this.log.warn(`lease cap failed: ${err.message}`)),
      ),
    );
  }

  /** The run-index entry naming this process, and the lock it holds, as the task's worker. */
  runEntry(
    owner: Owner,
    conversationId: string,
    taskId: string,
    lock: LockHandle,
    createdAt = new Date(this.now()).toISOString(),
  ): RunEntry {
    // The work's correlation id (the turn's, or, resumed by a recovery, the turn's again): a
    // recovery of the task runs under it. Read from CLS, in memory: no round trip.
    const { correlationId } = currentMdc();
    return {
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId,
      owner: this.instanceId,
      lockToken: lock.token,
      fence: lock.fence,
      createdAt,
      ...(correlationId ? { correlationId } : {}),
    };
  }

  /** Hands over every run still working, and any opened from now on; how many were handed over. */
  async handOverAll(): Promise<number> {
    this.handingOver = true;
    const handed = await atMostAtOnce(this.running(), RUN_WRITES_AT_ONCE, (run) => run.handOver());
    return handed.filter(Boolean).length;
  }

  /** A lease that was never taken or has run out: the task's worker stopped renewing it. */
  expired(task: TaskSession, now = this.now()): boolean {
    return !task.lease || Date.parse(task.lease.expiresAt) <= now;
  }
}
