import { Inject, Injectable, Logger } from '@nestjs/common';
import { randomBytes } from 'crypto';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import {
  LockHandle,
  Owner,
  RunEntry,
  SESSION_OPTIONS,
  SessionOptions,
  TaskRepository,
  TaskSession,
} from '@loom/session';

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
 */
export class TaskRun {
  /** Set by a streaming (SSE) turn: receives the reply's text as the answering agent writes it. */
  onDelta?: (agentType: string, text: string) => void;
  private chain: Promise<void> = Promise.resolve();
  private timer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    readonly owner: Owner,
    readonly task: TaskSession,
    readonly lock: LockHandle,
    private readonly opts: {
      tasks: TaskRepository;
      leaseMs: number;
      renewEveryMs: number;
      instanceId: string;
      log: Logger;
    },
  ) {}

  start(): this {
    this.timer = setInterval(() => void this.renew(), this.opts.renewEveryMs);
    this.timer.unref();
    return this;
  }

  /** Saves the task as it is now, with a lease running from now, after every earlier write. */
  checkpoint(): Promise<void> {
    return this.enqueue(() => {
      this.task.lease = {
        owner: this.opts.instanceId,
        expiresAt: new Date(Date.now() + this.opts.leaseMs).toISOString(),
      };
    });
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
  }

  private enqueue(prepare: () => void): Promise<void> {
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

/** Opens TaskRuns with this process's id, lease length and renewal cadence. */
@Injectable()
export class TaskLeases {
  private readonly log = new Logger('TaskLease');

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    @Inject(ORCHESTRATOR_ID) readonly instanceId: string,
    @Inject(SESSION_OPTIONS) private readonly session: SessionOptions,
    private readonly tasks: TaskRepository,
  ) {}

  get leaseMs(): number {
    return this.env.TASK_LEASE_MS;
  }

  open(owner: Owner, task: TaskSession, lock: LockHandle): TaskRun {
    const renewEveryMs = Math.max(
      100,
      Math.floor(Math.min(this.env.TASK_LEASE_MS, this.session.lockTtlMs) / 3),
    );
    return new TaskRun(owner, task, lock, {
      tasks: this.tasks,
      leaseMs: this.env.TASK_LEASE_MS,
      renewEveryMs,
      instanceId: this.instanceId,
      log: this.log,
    });
  }

  /** The run-index entry naming this process, and the lock it holds, as the task's worker. */
  runEntry(
    owner: Owner,
    conversationId: string,
    taskId: string,
    lock: LockHandle,
    createdAt = new Date().toISOString(),
  ): RunEntry {
    return {
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId,
      owner: this.instanceId,
      lockToken: lock.token,
      createdAt,
    };
  }

  /** A lease that was never taken or has run out: the task's worker stopped renewing it. */
  expired(task: TaskSession, now = Date.now()): boolean {
    return !task.lease || Date.parse(task.lease.expiresAt) <= now;
  }
}
