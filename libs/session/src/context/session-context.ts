import { ConversationRepository } from '../conversation/conversation.repository';
import { Owner } from '../conversation/owner';
import { TaskRepository } from '../conversation/task.repository';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { AgentSession } from '../model/agent.model';
import {
  ConversationMeta,
  ConversationMessage,
  ConversationSummary,
  UserProfile,
} from '../model/conversation.model';
import { ContextReport, SharedEntry, TaskSession } from '../model/task.model';
import { recentTurns, withinTokenBudget } from './history';
import { SharedContextAcl } from './shared-acl';

/** What one agent execution may touch: exactly one conversation, task and agent session. */
export interface Assignment {
  owner: Owner;
  conversationId: string;
  taskId: string;
  agentSessionId: string;
  agentType: string;
  agentId: string;
}

export interface ContextBudget {
  historyTokens: number;
  maxMessages: number;
}

export interface SessionContextDeps {
  conversations: ConversationRepository;
  tasks: TaskRepository;
  acl: SharedContextAcl;
  onOverwrite?: (e: {
    key: string;
    writer: string;
    previousWriter: string;
    taskId: string;
  }) => void;
}

/**
 * The three layers as one agent sees them (seed 000 SessionContext): recent history within a
 * token budget plus the summary, the task goal, task-shared data with writers, the user profile
 * and the agent's own memory. Built from Redis/MySQL for every execution.
 */
export class SessionContext {
  private constructor(
    private readonly deps: SessionContextDeps,
    readonly assignment: Assignment,
    readonly conversation: ConversationMeta,
    readonly task: TaskSession,
    readonly agent: AgentSession,
    readonly history: ConversationMessage[],
    readonly summary: ConversationSummary | null,
    private sharedView: Record<string, SharedEntry>,
  ) {}

  static async build(
    deps: SessionContextDeps,
    a: Assignment,
    budget: ContextBudget,
    agent: AgentSession,
  ): Promise<SessionContext> {
    const conversation = await deps.conversations.get(a.owner, a.conversationId);
    const task = await deps.tasks.get(a.owner, a.conversationId, a.taskId);
    if (!task) throw new LoomError(LoomErrorCode.NOT_FOUND, 'task not found');
    const summary = await deps.conversations.summary(a.owner, a.conversationId);
    const recent = await deps.conversations.messages(a.owner, a.conversationId, {
      afterSeq: summary?.toSeq ?? 0,
      last: budget.maxMessages + 1,
    });
    const beforeThisTurn = recent.filter((m) => m.seq < task.userSeq);
    const history = withinTokenBudget(
      beforeThisTurn.slice(-budget.maxMessages),
      budget.historyTokens,
    );
    const shared = await deps.tasks.shared(a.owner, a.conversationId, a.taskId);
    return new SessionContext(deps, a, conversation, task, agent, history, summary, shared);
  }

  /** The current user message this execution answers. */
  get question(): string {
    return this.task.userIntent;
  }

  getRecentHistory(maxTurns: number): ConversationMessage[] {
    return recentTurns(this.history, maxTurns);
  }

  getHistoryWithinBudget(maxTokens: number): ConversationMessage[] {
    return withinTokenBudget(this.history, maxTokens);
  }

  getSharedData<T = unknown>(key: string): T | undefined {
    return this.sharedView[key]?.value as T | undefined;
  }

  get shared(): Readonly<Record<string, SharedEntry>> {
    return this.sharedView;
  }

  /** Writes one task-shared key atomically, with this agent as writer, subject to the ACL. */
  async putSharedData(key: string, value: unknown): Promise<void> {
    const a = this.assignment;
    const latest = await this.deps.tasks.shared(a.owner, a.conversationId, a.taskId);
    const decision = this.deps.acl.check(
      this.task.taskType,
      key,
      a.agentType,
      latest[key]?.writer ?? null,
    );
    const write = { key, value, writer: a.agentType, updatedAt: new Date().toISOString() };
    await this.deps.tasks.putShared(a.owner, a.conversationId, a.taskId, write);
    if (decision.overwrites)
      this.deps.onOverwrite?.({
        key,
        writer: a.agentType,
        previousWriter: decision.overwrites,
        taskId: a.taskId,
      });
    this.sharedView = {
      ...latest,
      [key]: { value, writer: write.writer, updatedAt: write.updatedAt },
    };
  }

  getUserProfile(): UserProfile {
    return this.conversation.userProfile;
  }

  getTaskGoal(): string {
    return this.task.userIntent;
  }

  /** Private working memory of this agent session only. */
  remember(key: string, value: unknown): void {
    this.agent.localMemory[key] = value;
  }

  buildSystemPrompt(agentRole: string): string {
    const lines = [`You are ${agentRole}.`, '', `Current task goal: ${this.getTaskGoal()}`];
    if (this.summary)
      lines.push(
        '',
        `Summary of earlier conversation (seq ${this.summary.fromSeq}-${this.summary.toSeq}): ${this.summary.text}`,
      );
    const keys = Object.keys(this.sharedView);
    if (keys.length) {
      lines.push('', 'Information other agents already provided:');
      for (const k of keys)
        lines.push(
          `- ${k} (from ${this.sharedView[k].writer}): ${JSON.stringify(this.sharedView[k].value)}`,
        );
    }
    const style = this.conversation.userProfile.preferredResponseStyle;
    if (style) lines.push('', `Preferred response style: ${style}`);
    return lines.join('\n');
  }

  /** What this execution was shown, for TaskView `context`. */
  report(): ContextReport {
    return {
      historyMessages: this.history.length,
      summaryIncluded: this.summary !== null,
      sharedKeys: Object.keys(this.sharedView).sort(),
    };
  }
}
