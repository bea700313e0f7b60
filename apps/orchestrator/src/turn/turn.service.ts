import { Inject, Injectable, Logger } from '@nestjs/common';
import { createHash } from 'crypto';
import { ClsService } from 'nestjs-cls';
import {
  AGENT_REGISTRY,
  AgentRegistry,
  detectLanguage,
  LOOM_ENV,
  LoomEnv,
  Planner,
} from '@loom/agent-kit';
import {
  ConversationLock,
  ConversationMeta,
  ConversationRepository,
  LoomError,
  LoomErrorCode,
  newId,
  Owner,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { LoomClsStore } from '@loom/observability';
import { messageView, TurnView } from '../conversations/views';
import { TaskExecutor } from './task-executor';
import { HistoryMaintenance } from './history-maintenance';

export const MAX_CONTENT = 32_000;

/**
 * One user turn (DESIGN.md §6): lock, append the user message, plan, run the agents with a
 * checkpoint after each, append the reply, update the conversation, release.
 */
@Injectable()
export class TurnService {
  private readonly log = new Logger('TurnService');

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    @Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry,
    private readonly planner: Planner,
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly lock: ConversationLock,
    private readonly executor: TaskExecutor,
    private readonly history: HistoryMaintenance,
    private readonly cls: ClsService<LoomClsStore>,
  ) {}

  async turn(
    owner: Owner,
    conversationId: string,
    content: string,
    idempotencyKey?: string,
  ): Promise<TurnView> {
    if (typeof content !== 'string' || content.length > MAX_CONTENT) {
      throw new LoomError(
        LoomErrorCode.PAYLOAD_TOO_LARGE,
        `content must be at most ${MAX_CONTENT} characters`,
      );
    }
    await this.conversations.get(owner, conversationId);
    this.cls.set('conversationId', conversationId);
    const handle = await this.lock.acquire({ tenantId: owner.tenantId }, conversationId);
    try {
      const meta = await this.conversations.get(owner, conversationId, true);
      const keyHash = idempotencyKey
        ? createHash('sha256').update(idempotencyKey).digest('hex').slice(0, 40)
        : null;
      if (keyHash) {
        const previous = await this.tasks.idempotentTask(owner, conversationId, keyHash);
        if (previous) return this.replay(owner, conversationId, previous);
      }
      const language = detectLanguage(content);
      const history = await this.conversations.messages(owner, conversationId, { last: 10 });
      const userMessage = await this.conversations.appendMessage(
        owner,
        conversationId,
        {
          role: 'user',
          content,
          agentType: null,
          taskId: null,
          createdAt: new Date().toISOString(),
          tokens: 0,
        },
        handle.fence,
      );
      const agents = (await this.registry.live()).map((a) => a.descriptor);
      const plan = await this.planner.plan({
        message: content,
        history,
        currentIntent: meta.currentIntent,
        agents,
      });
      const task = this.newTask(owner, conversationId, content, plan, userMessage.seq, keyHash);
      this.cls.set('taskId', task.taskId);
      await this.tasks.create(owner, task, handle.fence);
      if (keyHash)
        await this.tasks.rememberIdempotent(
          owner,
          conversationId,
          keyHash,
          task.taskId,
          handle.fence,
        );
      meta.activeTaskIds = [...meta.activeTaskIds, task.taskId];
      await this.conversations.save(owner, meta, handle.fence);
      this.log.log(
        `plan ${plan.intent}: ${plan.steps.map((s) => s.agentType).join(' → ') || '(none)'}`,
      );

      const outcome = await this.executor.run(owner, task, language, handle);
      const reply = await this.conversations.appendMessage(
        owner,
        conversationId,
        {
          role: 'assistant',
          content: outcome.reply,
          agentType: outcome.answeredBy,
          taskId: task.taskId,
          createdAt: new Date().toISOString(),
          tokens: 0,
        },
        handle.fence,
      );
      await this.executor.complete(owner, task, reply.seq, handle.fence);
      await this.finishConversation(
        owner,
        meta,
        task,
        plan.intent,
        language,
        reply.seq,
        outcome.usage,
        handle.fence,
      );
      await this.history
        .afterTurn(owner, conversationId, handle.fence)
        .catch((err) => this.log.warn(`history maintenance failed: ${err.message}`));
      return {
        taskId: task.taskId,
        agents: plan.steps.map((s) => s.agentType),
        userMessage: messageView(userMessage),
        reply: messageView(reply),
      };
    } finally {
      await handle.release();
    }
  }

  /** A retried request: the TurnView of the first, nothing added. */
  private async replay(owner: Owner, conversationId: string, taskId: string): Promise<TurnView> {
    const task = await this.tasks.get(owner, conversationId, taskId);
    if (!task || task.replySeq === null)
      throw new LoomError(
        LoomErrorCode.CONFLICT,
        'the first request with this Idempotency-Key has not finished',
      );
    const [user] = await this.conversations.messages(owner, conversationId, {
      afterSeq: task.userSeq - 1,
      limit: 1,
    });
    const [reply] = await this.conversations.messages(owner, conversationId, {
      afterSeq: task.replySeq - 1,
      limit: 1,
    });
    return {
      taskId,
      agents: task.plan.map((s) => s.agentType),
      userMessage: messageView(user),
      reply: messageView(reply),
    };
  }

  private async finishConversation(
    owner: Owner,
    meta: ConversationMeta,
    task: TaskSession,
    intent: string,
    language: string,
    replySeq: number,
    usage: { promptTokens: number; completionTokens: number; costUsd: number },
    fence: number,
  ): Promise<void> {
    const fresh = await this.conversations.get(owner, meta.conversationId, true);
    fresh.currentIntent = intent;
    fresh.language = language;
    fresh.messageCount = replySeq;
    fresh.lastActiveAt = new Date().toISOString();
    fresh.activeTaskIds = fresh.activeTaskIds.filter((id) => id !== task.taskId);
    fresh.usage = {
      promptTokens: fresh.usage.promptTokens + usage.promptTokens,
      completionTokens: fresh.usage.completionTokens + usage.completionTokens,
      costUsd: fresh.usage.costUsd + usage.costUsd,
    };
    if (!fresh.title) fresh.title = await this.history.title(task.userIntent);
    await this.conversations.save(owner, fresh, fence);
  }

  private newTask(
    owner: Owner,
    conversationId: string,
    content: string,
    plan: { intent: string; taskType: string; steps: TaskSession['plan'] },
    userSeq: number,
    keyHash: string | null,
  ): TaskSession {
    return {
      taskId: newId('t'),
      conversationId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: plan.taskType,
      userIntent: content,
      intent: plan.intent,
      plan: plan.steps,
      status: TaskStatus.RUNNING,
      executions: [],
      userSeq,
      replySeq: null,
      idempotencyKey: keyHash,
      lease: {
        owner: 'orchestrator',
        expiresAt: new Date(Date.now() + this.env.TASK_LEASE_MS).toISOString(),
      },
      createdAt: new Date().toISOString(),
      completedAt: null,
      error: null,
    };
  }
}
