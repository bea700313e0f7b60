import { Inject, Injectable, Logger } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { AssignmentSigner } from '@loom/security';
import {
  AgentExecutionRecord,
  emptyUsage,
  ExecutionStatus,
  LockHandle,
  LoomError,
  LoomErrorCode,
  newId,
  Owner,
  TaskRepository,
  TaskSession,
  TaskStatus,
  Usage,
} from '@loom/session';
import { LoomClsStore } from '@loom/observability';
import { AgentDispatcher } from '../dispatch/agent-dispatcher';

export interface TaskOutcome {
  reply: string;
  answeredBy: string | null;
  usage: Usage;
}

/**
 * Runs a task's plan in order: dispatch each agent with a signed assignment, record the
 * execution and checkpoint the task after every step (seed 000 pitfall 4). A required failure
 * fails the task; an optional one is recorded and skipped.
 */
@Injectable()
export class TaskExecutor {
  private readonly log = new Logger('TaskExecutor');

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly dispatcher: AgentDispatcher,
    private readonly signer: AssignmentSigner,
    private readonly tasks: TaskRepository,
    private readonly cls: ClsService<LoomClsStore>,
  ) {}

  async run(
    owner: Owner,
    task: TaskSession,
    language: 'zh' | 'en',
    lock: LockHandle,
  ): Promise<TaskOutcome> {
    const finished = new Set(
      task.executions.filter((e) => e.status === ExecutionStatus.COMPLETED).map((e) => e.agentType),
    );
    const settled = new Set(finished);
    // Checkpoints of parallel steps are written one after another, each with everything so far.
    let checkpoints = Promise.resolve();
    const checkpoint = () =>
      (checkpoints = checkpoints.then(() => this.tasks.save(owner, task, lock.fence)));
    // Waves: every step whose dependencies have settled runs now, independent ones in parallel.
    for (;;) {
      const wave = task.plan.filter(
        (s) => !settled.has(s.agentType) && s.dependsOn.every((d) => settled.has(d)),
      );
      if (wave.length === 0) break;
      await Promise.all(
        wave.map(async (step) => {
          const record = await this.execute(owner, task, step.agentType, language);
          settled.add(step.agentType);
          task.executions = [...task.executions, record];
          await checkpoint();
        }),
      );
      await lock.renew();
      const failed = wave.find(
        (s) => s.required && this.latest(task, s.agentType)?.status === ExecutionStatus.FAILED,
      );
      if (failed) {
        const error = this.latest(task, failed.agentType)!.error;
        task.status = TaskStatus.FAILED;
        task.error = error;
        task.completedAt = new Date().toISOString();
        await this.tasks.save(owner, task, lock.fence);
        throw new LoomError(
          LoomErrorCode.AGENT_FAILED,
          `required agent ${failed.agentType} failed: ${error?.message ?? 'unknown error'}`,
        );
      }
    }
    return this.outcome(task, language);
  }

  /** The reply is the last completed required step's output (else any completed step's). */
  private outcome(task: TaskSession, language: 'zh' | 'en'): TaskOutcome {
    const usage = emptyUsage();
    let reply: string | null = null;
    let answeredBy: string | null = null;
    for (const step of task.plan) {
      const record = this.latest(task, step.agentType);
      if (record?.status !== ExecutionStatus.COMPLETED) continue;
      usage.promptTokens += record.usage.promptTokens;
      usage.completionTokens += record.usage.completionTokens;
      usage.costUsd += record.usage.costUsd;
      if (step.required || reply === null) {
        reply = record.output;
        answeredBy = step.agentType;
      }
    }
    return {
      reply:
        reply ??
        (language === 'zh'
          ? '抱歉，目前没有可用的专家来回答这个问题。'
          : 'Sorry, no specialist is available for this question right now.'),
      answeredBy,
      usage,
    };
  }

  private latest(task: TaskSession, agentType: string): AgentExecutionRecord | undefined {
    return task.executions.filter((e) => e.agentType === agentType).at(-1);
  }

  /** Marks the task COMPLETED with its reply and drops its agent sessions (seed 000 pitfall 3). */
  async complete(owner: Owner, task: TaskSession, replySeq: number, fence: number): Promise<void> {
    task.status = TaskStatus.COMPLETED;
    task.replySeq = replySeq;
    task.completedAt = new Date().toISOString();
    task.lease = null;
    await this.tasks.save(owner, task, fence);
    await this.tasks.removeAgentSessions(
      owner,
      task.conversationId,
      task.executions.map((e) => e.agentSessionId),
    );
  }

  private async execute(
    owner: Owner,
    task: TaskSession,
    agentType: string,
    language: 'zh' | 'en',
  ): Promise<AgentExecutionRecord> {
    const agentSessionId = newId('a');
    const startedAt = new Date().toISOString();
    const assignment = this.signer.sign({
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: task.conversationId,
      taskId: task.taskId,
      agentSessionId,
      agentType,
      expiresAt: Date.now() + this.env.AGENT_TIMEOUT_MS * 2,
    });
    const meta = {
      correlationId: this.cls.get('correlationId') ?? newId('r'),
      tenantId: owner.tenantId,
      conversationId: task.conversationId,
      taskId: task.taskId,
      agentType,
    };
    const base = {
      agentSessionId,
      agentType,
      attempts: 1,
      startedAt,
      context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
      usage: emptyUsage(),
    };
    try {
      const result = await this.dispatcher.execute(agentType, { assignment, meta, language });
      this.log.log(`${agentType} answered (${result.context.historyMessages} history messages)`);
      return {
        ...base,
        status: ExecutionStatus.COMPLETED,
        completedAt: new Date().toISOString(),
        error: null,
        context: result.context,
        output: result.output,
        usage: result.usage,
      };
    } catch (err) {
      const e = LoomError.is(err)
        ? err
        : new LoomError(LoomErrorCode.AGENT_FAILED, 'agent call failed');
      this.log.warn(`${agentType} failed: ${e.code} ${e.message}`);
      return {
        ...base,
        status: ExecutionStatus.FAILED,
        completedAt: new Date().toISOString(),
        error: { code: e.code, message: e.message },
        output: null,
      };
    }
  }
}
