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
    const usage = emptyUsage();
    let reply: string | null = null;
    let answeredBy: string | null = null;
    for (const step of task.plan) {
      const done = task.executions.find(
        (e) => e.agentType === step.agentType && e.status === ExecutionStatus.COMPLETED,
      );
      const record = done ?? (await this.execute(owner, task, step.agentType, language));
      if (!done) {
        task.executions = [
          ...task.executions.filter((e) => e.agentSessionId !== record.agentSessionId),
          record,
        ];
        await this.tasks.save(owner, task, lock.fence);
        await lock.renew();
      }
      if (record.status === ExecutionStatus.FAILED && step.required) {
        task.status = TaskStatus.FAILED;
        task.error = record.error;
        task.completedAt = new Date().toISOString();
        await this.tasks.save(owner, task, lock.fence);
        throw new LoomError(
          LoomErrorCode.AGENT_FAILED,
          `required agent ${step.agentType} failed: ${record.error?.message ?? 'unknown error'}`,
        );
      }
      if (record.status === ExecutionStatus.COMPLETED) {
        usage.promptTokens += record.usage.promptTokens;
        usage.completionTokens += record.usage.completionTokens;
        usage.costUsd += record.usage.costUsd;
        if (step.required || reply === null) {
          reply = record.output;
          answeredBy = step.agentType;
        }
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
