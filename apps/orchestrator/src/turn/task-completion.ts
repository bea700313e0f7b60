import { Injectable, Logger } from '@nestjs/common';
import { detectLanguage } from '@loom/agent-kit';
import {
  addUsage,
  ConversationMessage,
  ConversationMeta,
  ConversationRepository,
  LoomError,
  LoomErrorCode,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskSession,
  TaskStatus,
  Usage,
} from '@loom/session';
import { messageView, TurnView } from '../conversations/views';
import { MetricsService } from '../metrics/metrics.service';
import { HistoryMaintenance } from './history-maintenance';
import { failureCode, TaskOutcome, usageToCount } from './task-executor';
import { TaskRun } from './task-run';

/**
 * The end of a task, written so that a crash between any two writes is finished by recovery
 * without doing anything twice: (1) the reply, unless one with this taskId exists; (2) the
 * conversation (usage, intent, messageCount), only while the task is still in activeTaskIds,
 * which that same write clears; (3) the task COMPLETED, lease dropped; (4) agent sessions and
 * the run-index entry removed.
 */
@Injectable()
export class TaskCompletion {
  private readonly log = new Logger('TaskCompletion');

  constructor(
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly system: SystemRepository,
    private readonly history: HistoryMaintenance,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * `reply`: the reply an earlier attempt already appended (recovery), else null. `known`: what
   * the caller already holds: the task's user message (the view then reads neither message
   * back), and the conversation as the caller saved it under the lock it still holds (nobody
   * else writes it meanwhile, so it is not read again).
   */
  async finish(
    run: TaskRun,
    outcome: TaskOutcome,
    reply: ConversationMessage | null,
    known: { user?: ConversationMessage; meta?: ConversationMeta } = {},
  ): Promise<TurnView> {
    const { owner, task, lock } = run;
    reply ??= await this.conversations.appendMessage(
      owner,
      task.conversationId,
      {
        role: 'assistant',
        content: outcome.reply,
        agentType: outcome.answeredBy,
        taskId: task.taskId,
        createdAt: this.conversations.now(),
        tokens: 0,
      },
      lock.fence,
    );
    await this.applyToConversation(owner, task, reply.seq, outcome.usage, lock.fence, known.meta);
    task.status = TaskStatus.COMPLETED;
    task.replySeq = reply.seq;
    task.completedAt = new Date(run.now()).toISOString(); // the scan reads it on that clock
    task.error = null;
    await run.close();
    const [view] = await Promise.all([
      this.view(owner, task, { user: known.user, reply }),
      this.cleanup(owner, task, lock.fence),
    ]);
    return view;
  }

  /** A required step failed: the task is FAILED, leaves the conversation's active tasks. */
  async fail(run: TaskRun, error: { code: string; message: string }): Promise<void> {
    const { owner, task, lock } = run;
    task.status = TaskStatus.FAILED;
    task.error = { code: error.code, message: error.message }; // a Retry-After is the live answer's
    task.completedAt = new Date(run.now()).toISOString(); // the scan reads it on that clock
    await run.close();
    await this.leave(owner, task, lock.fence);
    await this.cleanup(owner, task, lock.fence);
  }

  /** A closed task still indexed or listed as active (its worker died after closing it). */
  async tidy(owner: Owner, task: TaskSession, fence: number): Promise<void> {
    await this.leave(owner, task, fence);
    await this.cleanup(owner, task, fence);
  }

  /** The TurnView of a finished task; the failed task's error; CONFLICT while it still runs. */
  async view(
    owner: Owner,
    task: TaskSession,
    known: { user?: ConversationMessage; reply?: ConversationMessage } = {},
  ): Promise<TurnView> {
    if (task.status === TaskStatus.FAILED) throw failure(task.error);
    if (task.status !== TaskStatus.COMPLETED || task.replySeq === null)
      throw new LoomError(
        LoomErrorCode.CONFLICT,
        'the first request with this Idempotency-Key has not finished',
      );
    const replySeq = task.replySeq;
    const read = async (seq: number) => {
      const [m] = await this.conversations.messages(owner, task.conversationId, {
        afterSeq: seq - 1,
        limit: 1,
      });
      return m?.seq === seq ? m : null;
    };
    const both = () =>
      Promise.all([
        known.user?.seq === task.userSeq ? known.user : read(task.userSeq),
        known.reply?.seq === replySeq ? known.reply : read(replySeq),
      ]);
    let [user, reply] = await both();
    if (!user || !reply) {
      // Redis may list the messages short yet complete (a refill that read MySQL before an
      // append whose own Redis write was lost): drop the cached copies and read them again.
      await this.conversations.refresh(task.conversationId);
      [user, reply] = await both();
    }
    if (!user || !reply)
      throw new LoomError(LoomErrorCode.UNAVAILABLE, 'the stored turn could not be read: retry');
    return {
      taskId: task.taskId,
      agents: task.plan.map((s) => s.agentType),
      userMessage: messageView(user),
      reply: messageView(reply),
    };
  }

  /**
   * Best effort: leftovers expire (agent rows) or are tidied by the next recovery scan. The task
   * stays in the run index until its agent sessions are gone from Redis too: if Redis failed
   * and this process stops before it drops them, the recovery scan finds the closed task, drops
   * the conversation's cached copies and tidies it again. The index entry goes only if no later
   * owner of the task (a retry or a recovery, under a newer fence) has indexed it since: this
   * process may have paused past its lock before it got here.
   */
  private async cleanup(owner: Owner, task: TaskSession, fence: number): Promise<void> {
    try {
      const gone = await this.tasks.removeAgentSessions(
        owner,
        task.conversationId,
        task.executions.map((e) => e.agentSessionId),
      );
      if (gone) await this.system.removeRun(task.taskId, fence);
      else this.log.warn(`cleanup of ${task.taskId}: Redis failed; the recovery scan tidies it`);
    } catch (err) {
      this.log.warn(`cleanup of ${task.taskId} incomplete: ${(err as Error).message}`);
    }
  }

  private async applyToConversation(
    owner: Owner,
    task: TaskSession,
    replySeq: number,
    usage: Usage,
    fence: number,
    known?: ConversationMeta,
  ): Promise<void> {
    const meta = known ?? (await this.conversations.get(owner, task.conversationId, true));
    if (!meta.activeTaskIds.includes(task.taskId)) return; // applied before a crash
    meta.currentIntent = task.intent;
    meta.language = detectLanguage(task.userIntent);
    meta.messageCount = Math.max(meta.messageCount, replySeq);
    meta.lastActiveAt = this.conversations.now();
    meta.activeTaskIds = meta.activeTaskIds.filter((id) => id !== task.taskId);
    let spent = usage;
    if (!meta.title) {
      const titled = await this.history.title(task.userIntent);
      meta.title = titled.title;
      spent = addUsage(spent, titled.usage);
    }
    meta.usage = addUsage(meta.usage, spent);
    await this.conversations.save(owner, meta, fence);
    this.metrics.spent(spent);
  }

  private async leave(owner: Owner, task: TaskSession, fence: number): Promise<void> {
    const meta = await this.conversations.find(owner, task.conversationId, true);
    if (!meta?.activeTaskIds.includes(task.taskId)) return;
    meta.activeTaskIds = meta.activeTaskIds.filter((id) => id !== task.taskId);
    // What a failed task's model calls cost is spent all the same.
    const spent = usageToCount(task);
    meta.usage = addUsage(meta.usage, spent);
    // A failed turn's user message stays in the log: the count includes it.
    meta.messageCount = Math.max(meta.messageCount, task.userSeq);
    meta.lastActiveAt = this.conversations.now();
    await this.conversations.save(owner, meta, fence);
    this.metrics.spent(spent);
  }
}

/**
 * A failed task's error as the caller sees it: TIMEOUT/UNAVAILABLE (503), CONFLICT (409: it was
 * interrupted and the conversation went on past it, see TaskResumer), DEAD_LETTERED (502), else
 * AGENT_FAILED.
 */
export function failure(
  error: { code: string; message: string; retryAfterS?: number } | null,
): LoomError {
  const code = error?.code === LoomErrorCode.CONFLICT ? LoomErrorCode.CONFLICT : failureCode(error);
  // A busy model provider's Retry-After: the HTTP answer's header (see HttpErrorFilter).
  const details = error?.retryAfterS !== undefined ? { retryAfterS: error.retryAfterS } : undefined;
  return new LoomError(code, error?.message ?? 'the task failed', details);
}
