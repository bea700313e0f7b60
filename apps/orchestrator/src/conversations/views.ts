import { ConversationMeta, ConversationMessage, TaskSession } from '@loom/session';

/** API.md's views: what leaves the service, nothing more (no tenant ids, no internals). */
export const conversationView = (m: ConversationMeta) => ({
  conversationId: m.conversationId,
  title: m.title,
  status: m.status,
  currentIntent: m.currentIntent,
  activeTaskIds: m.activeTaskIds,
  messageCount: m.messageCount,
  createdAt: m.createdAt,
  lastActiveAt: m.lastActiveAt,
  usage: m.usage,
});

export const messageView = (m: ConversationMessage) => ({
  seq: m.seq,
  role: m.role,
  content: m.content,
  agentType: m.agentType,
  taskId: m.taskId,
  createdAt: m.createdAt,
});

export type MessageView = ReturnType<typeof messageView>;

export interface TurnView {
  taskId: string;
  agents: string[];
  userMessage: MessageView;
  reply: MessageView;
}

export const taskView = (t: TaskSession) => ({
  taskId: t.taskId,
  conversationId: t.conversationId,
  taskType: t.taskType,
  status: t.status,
  userIntent: t.userIntent,
  plan: t.plan,
  executions: t.executions.map((e) => ({
    agentSessionId: e.agentSessionId,
    agentType: e.agentType,
    status: e.status,
    attempts: e.attempts,
    startedAt: e.startedAt,
    completedAt: e.completedAt,
    error: e.error && { code: e.error.code, message: e.error.message },
    context: e.context,
  })),
  sharedContext: {} as Record<string, { value: unknown; writer: string; updatedAt: string }>,
  createdAt: t.createdAt,
  completedAt: t.completedAt,
});
