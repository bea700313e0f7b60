import { Inject, Injectable, Logger } from '@nestjs/common';
import {
  ConversationRepository,
  ExecutionClaims,
  LockHandle,
  LoomError,
  Owner,
  SESSION_INFRA,
  SessionInfra,
  SystemRepository,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { runWithMdc } from '@loom/observability';
import { shutdownRefusal } from '../lifecycle/shutdown-refusal';
import { conversationWentOn, wentOnSince } from './conversation-went-on';
import { TaskCompletion } from './task-completion';
import { reopenFailedSteps, replacedExecutions, transientFailure } from './task-executor';
import { TaskResumer } from './task-resumer';
import { TaskLeases } from './task-run';

const shuttingDown = (): LoomError =>
  shutdownRefusal('this orchestrator is shutting down: retry with the same Idempotency-Key');

/** A task that failed for a passing reason (503: TIMEOUT, UNAVAILABLE): its retry runs it again. */
export const retryable = (task: TaskSession): boolean =>
  task.status === TaskStatus.FAILED && transientFailure(task.error);

/**
 * An Idempotency-Key retry of a turn whose task failed with a 503: the answer told the client
 * to retry, so the retry takes the task up again from its last checkpoint, under the
 * conversation lock the caller holds. Completed steps stand; the failed ones get new
 * executions; the user message is not appended again, the reply is appended once. Not once the
 * conversation has gone on (a later message): the reply would land after later turns, so the
 * key answers 409 and the client sends the message again under a new one.
 *
 * First the claims of the executions it replaces are revoked: one of them still running (a slow
 * agent, or one paused and resumed) has its next write refused (SUPERSEDED) rather than writing
 * the task's shared keys and its agent session beside the new execution. An agent refuses a
 * delivery of a failed execution only as it starts.
 *
 * Writes, each finished by someone should the process die after it: the task, still FAILED,
 * marked as counted in the conversation's usage (a later tidy-up counts nothing twice); the
 * run-index entry naming this lock (the scan tidies a FAILED task it names once this holder is
 * gone); the task in the conversation's active tasks (the next turn or a retry takes it up
 * again, or tidies it); the task RUNNING with a lease and the new executions (the scan resumes
 * it once the lease has run out).
 */
@Injectable()
export class TaskRetry {
  private readonly log = new Logger('TaskRetry');
  private readonly claims: ExecutionClaims;

  constructor(
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly system: SystemRepository,
    private readonly completion: TaskCompletion,
    private readonly resumer: TaskResumer,
    private readonly leases: TaskLeases,
    @Inject(SESSION_INFRA) infra: SessionInfra,
  ) {
    this.claims = new ExecutionClaims(infra.redis, infra.keys);
  }

  /** The task as this attempt ends it (COMPLETED, or FAILED again). */
  retry(
    owner: Owner,
    task: TaskSession,
    lock: LockHandle,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<TaskSession> {
    return runWithMdc({ taskId: task.taskId }, () => this.reopen(owner, task, lock, onDelta));
  }

  private async reopen(
    owner: Owner,
    task: TaskSession,
    lock: LockHandle,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<TaskSession> {
    const { conversationId, taskId } = task;
    // Whatever a killed process committed to MySQL but not to Redis (a message) must be seen.
    await this.conversations.refresh(conversationId);
    if (await wentOnSince(this.conversations, owner, task)) throw conversationWentOn();
    // A run opened now would be handed over at once, leaving the task reopened but not in the
    // run index: nothing is written, and the client retries on another replica.
    if (this.leases.handingOverNow) throw shuttingDown();
    const replaced = replacedExecutions(task).map((e) => e.agentSessionId);
    await this.claims.revoke(conversationId, replaced);
    // Its failure fully written (out of the active tasks, its cost counted) before it reopens.
    await this.completion.tidy(owner, task, lock.fence);
    task.countedExecutions = task.executions.length;
    // Closed as of now: the scan leaves the index entry written next alone for a lease's time
    // (and while this lock's holder lives), however long ago the task first failed.
    task.completedAt = new Date(this.leases.now()).toISOString(); // the scan's clock
    await this.tasks.save(owner, task, lock.fence);
    // Back in the run index (tidy took it out) before the task is RUNNING again: a process that
    // dies once it is leaves it to the scan, not only to a client that may never come back.
    await this.system.saveRun(
      this.leases.runEntry(owner, conversationId, taskId, lock, task.createdAt),
    );
    const meta = await this.conversations.get(owner, conversationId, true);
    meta.activeTaskIds = [...meta.activeTaskIds, taskId];
    await this.conversations.save(owner, meta, lock.fence);
    // A hand-over begun during those writes: the task stays FAILED, in the active tasks (the next
    // turn or a retry tidies it), as after a crash here. Nothing is awaited from here to the
    // run's opening, so no later hand-over can find it reopened and not yet indexed.
    if (this.leases.handingOverNow) throw shuttingDown();
    const reopened = reopenFailedSteps(task, new Date(this.leases.now()).toISOString());
    this.log.log(`retrying ${taskId} (${task.error?.code}): ${reopened} steps again`);
    task.status = TaskStatus.RUNNING;
    task.error = null;
    task.completedAt = null;
    return this.resumer.proceed(owner, task, lock, null, onDelta);
  }
}
