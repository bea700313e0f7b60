import { ExecutionStatus } from './task.model';

export interface ToolCallRecord {
  tool: string;
  input: unknown;
  output: unknown;
  at: string;
}

/** The agent layer: one agent's private state for one task (seed 000 AgentSession). */
export interface AgentSession {
  agentSessionId: string;
  conversationId: string;
  taskId: string;
  agentId: string;
  agentType: string;
  status: ExecutionStatus;
  attempts: number;
  lastError: string | null;
  localMemory: Record<string, unknown>;
  toolCalls: ToolCallRecord[];
  /** The agent's private messages, kept in its session: one write per execution, not one per message. */
  messages: PrivateMessage[];
  output: unknown;
  startedAt: string;
  completedAt: string | null;
}

export interface PrivateMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  at: string;
}
