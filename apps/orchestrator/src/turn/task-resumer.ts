import { Injectable, Logger } from '@nestjs/common';
import { detectLanguage } from '@loom/agent-kit';
import {
  ConversationMessage,
  ConversationRepository,
  ExecutionStatus,
  LockHandle,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { runWithMdc } from '@loom/observability';
import { RecoveryOutcome } from '../metrics/metric-labels';
import { MetricsService } from '../metrics/metrics.service';
import { conversationWentOn, wentOnSince } from './conversation-went-on';
import { HistoryMaintenance } from './history-maintenance';
import { TaskCompletion } from './task-completion';
import { TaskExecutor, usageToCount } from './task-executor';
import { TaskLeases } from './task-run';

/**
 * Finishes an interrupted task from its last checkpoint, under the conversation lock the caller
 * holds (a later turn of the same conversation, an Idempotency-Key retry, or the recovery
 * scheduler). Settled steps are not re-run, the reply is appended once, and whatever the
 * crashed worker left half-done is completed or tidied. A task without a reply whose message
 * is no longer the conversation's newest (its worker died before the task joined the active
 * tasks, so later turns went ahead) fails with CONFLICT instead: its reply would land after
 * theirs, and its Idempotency-Key answers 409, as for a failed turn the conversation went on from.
 */
@Injectable()
export class TaskResumer {
  private readonly log = new Logger('TaskResumer');

  constructor(
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly system: SystemRepository,
    private readonly leases: TaskLeases,
    private readonly executor: TaskExecutor,
    private readonly completion: TaskCompletion,
    private readonly history: HistoryMaintenance,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * The task as it ends up (COMPLETED, FAILED), or null when it no longer exists. Counted in
   * loom_tasks_recovered_total by how it ended (`error`: this attempt threw, the task stays).
   * `onDelta`: a streaming retry of the task's own turn (its Idempotency-Key), which gets the
   * answer as it is written.
   */
  resume(
    owner: Owner,
    conversationId: string,
    taskId: string,
    lock: LockHandle,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<TaskSession | null> {
    // Its log lines carry its own task id, also when a later turn resumes it.
    return runWithMdc({ taskId }, async () => {
      try {
        const { task, outcome } = await this.settle(owner, conversationId, taskId, lock, onDelta);
        this.metrics.recovered(outcome);
        return task;
      } catch (err) {
        this.metrics.recovered('error');
        throw err;
      }
    });
  }

  private async settle(
    owner: Owner,
    conversationId: string,
    taskId: string,
    lock: LockHandle,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<{ task: TaskSession | null; outcome: RecoveryOutcome }> {
    // What a killed process committed to MySQL but not to Redis must be seen.
    await this.conversations.refresh(conversationId);
    const meta = await this.conversations.find(owner, conversationId, true);
    const task = meta && (await this.tasks.get(owner, conversationId, taskId, true));
    if (!meta || !task) {
      if (meta?.activeTaskIds.includes(taskId)) {
        meta.activeTaskIds = meta.activeTaskIds.filter((id) => id !== taskId);
        await this.conversations.save(owner, meta, lock.fence);
      }
      await this.system.removeRun(taskId);
      return { task: null, outcome: 'gone' };
    }
    if (task.status !== TaskStatus.RUNNING) {
      await this.completion.tidy(owner, task, lock.fence);
      return { task, outcome: 'tidied' };
    }
    this.log.log(
      `resuming ${taskId}: ${task.executions.filter((e) => e.status !== ExecutionStatus.RUNNING).length} ` +
        `of ${task.plan.length} steps settled`,
    );
    const reply = await this.conversations.findReply(owner, conversationId, taskId, task.userSeq);
    if (!reply && !meta.activeTaskIds.includes(taskId)) {
      // Crashed before it joined the conversation's active tasks: join now, before any reply (or
      // before it fails, below: leaving them counts what it spent).
      meta.activeTaskIds = [...meta.activeTaskIds, taskId];
      await this.conversations.save(owner, meta, lock.fence);
    }
    if (!reply && (await wentOnSince(this.conversations, owner, task))) {
      // Not in the active tasks, it held no later turn back: its reply would land after theirs.
      this.log.warn(`${taskId} fails: the conversation went on past its message`);
      const { code, message } = conversationWentOn();
      await this.completion.fail(this.leases.open(owner, task, lock), { code, message });
      return { task, outcome: 'failed' };
    }
    const ended = await this.proceed(owner, task, lock, reply, onDelta);
    return { task: ended, outcome: ended.status === TaskStatus.COMPLETED ? 'completed' : 'failed' };
  }

  /**
   * Runs a RUNNING task (as read, or as a retry reopened it, not saved yet) from where it
   * stands to its end, with a lease of this process; `reply`: the one an earlier attempt
   * appended. `onDelta`: a streaming retry's, which gets the answer as it is written.
   */
  async proceed(
    owner: Owner,
    task: TaskSession,
    lock: LockHandle,
    reply: ConversationMessage | null,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<TaskSession> {
    const { conversationId, taskId } = task;
    const run = this.leases.open(owner, task, lock).start();
    run.onDelta = onDelta;
    try {
      await run.checkpoint();
      // Only now, with the lease renewed, does the index name this lock: whoever reads the new
      // token there (a scan, a waiting turn) reads a live lease after it, and takes nothing over.
      await this.system.saveRun(
        this.leases.runEntry(owner, conversationId, taskId, lock, task.createdAt),
      );
      const result = await run.guard(this.executor.run(run, detectLanguage(task.userIntent)));
      if (result.ok) await this.completion.finish(run, result.outcome, reply);
      else if (reply)
        // The reply was stored before the crash: the turn was answered. Steps dispatched again
        // only to collect their records (an agent down by now) do not undo that answer.
        await this.completion.finish(
          run,
          { reply: reply.content, answeredBy: reply.agentType, usage: usageToCount(task) },
          reply,
        );
      else await this.completion.fail(run, result.error);
    } finally {
      run.stop();
    }
    await this.history
      .afterTurn(owner, conversationId, lock.fence)
      .catch((err) => this.log.warn(`history maintenance failed: ${err.message}`));
    this.log.log(`resumed ${taskId}: ${task.status}`);
    return task;
  }
}
