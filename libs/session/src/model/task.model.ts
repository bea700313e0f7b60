import { Usage } from './conversation.model';

export enum TaskStatus {
  PENDING = 'PENDING',
  RUNNING = 'RUNNING',
  COMPLETED = 'COMPLETED',
  FAILED = 'FAILED',
}

export enum ExecutionStatus {
  PENDING = 'PENDING',
  RUNNING = 'RUNNING',
  COMPLETED = 'COMPLETED',
  FAILED = 'FAILED',
  SKIPPED = 'SKIPPED',
}

export interface PlanStep {
  agentType: string;
  required: boolean;
  dependsOn: string[];
}

/** What an agent execution was shown (TaskView `context`). */
export interface ContextReport {
  historyMessages: number;
  summaryIncluded: boolean;
  sharedKeys: string[];
}

export interface AgentExecutionRecord {
  agentSessionId: string;
  agentType: string;
  status: ExecutionStatus;
  attempts: number;
  startedAt: string;
  completedAt: string | null;
  /**
   * Why it failed; `retryAfterS`: a busy model provider's Retry-After, passed on to the HTTP
   * client of the turn (not in TaskView).
   */
  error: { code: string; message: string; retryAfterS?: number } | null;
  context: ContextReport;
  output: string | null;
  usage: Usage;
  /** The task-shared keys the execution wrote (not in TaskView: its writes carry their writer). */
  sharedKeysWritten?: string[];
  /**
   * The delivery of the execution whose result this is (not in TaskView): of its writes to
   * task-shared context, only that delivery's are shown (see `sharedVisibleTo`).
   */
  delivery?: string;
}

/** The task layer: one multi-agent collaboration for one user turn (seed 000 TaskSession). */
export interface TaskSession {
  taskId: string;
  conversationId: string;
  tenantId: string;
  userId: string;
  taskType: string;
  userIntent: string;
  intent: string;
  plan: PlanStep[];
  status: TaskStatus;
  executions: AgentExecutionRecord[];
  userSeq: number;
  replySeq: number | null;
  idempotencyKey: string | null;
  lease: { owner: string; expiresAt: string } | null;
  createdAt: string;
  completedAt: string | null;
  error: { code: string; message: string } | null;
  /** What the planner's model call cost; counted into the conversation's usage with the task. */
  planUsage?: Usage | null;
  /**
   * Set when a task that failed is retried (its Idempotency-Key again): the conversation's usage
   * already counts the planner's call and this many of the first executions, the earlier
   * attempts'. Only what came after is counted when the task ends again.
   */
  countedExecutions?: number;
}

/** One write to task-shared context; the log of writes is folded into the current view. */
export interface SharedWrite {
  key: string;
  value: unknown;
  writer: string;
  updatedAt: string;
  /** The agentSessionId of the execution that wrote it (absent: the orchestrator's, or older). */
  execution?: string;
  /** Which delivery of that execution wrote it (one per run of its handler). */
  delivery?: string;
}

export interface SharedEntry {
  value: unknown;
  writer: string;
  updatedAt: string;
}
