import { ApiExtraModels, ApiProperty, getSchemaPath } from '@nestjs/swagger';
import {
  ConversationStatus,
  ExecutionStatus,
  ID_PATTERN as ID,
  LoomErrorCode,
  TaskStatus,
} from '@loom/session';

/**
 * API.md's views and error body as OpenAPI schemas: documentation only (the views themselves
 * are built in conversations/views.ts). test/ checks every real response against these.
 */
export const ID_PATTERN = ID.source;

/** Codes that stay inside Loom: an agent's, or mapped to CONFLICT before a client sees them. */
const INTERNAL_CODES: string[] = [
  LoomErrorCode.LOCK_TIMEOUT,
  LoomErrorCode.STALE_FENCING_TOKEN,
  LoomErrorCode.ASSIGNMENT_REJECTED,
  LoomErrorCode.ACCESS_DENIED,
  LoomErrorCode.SUPERSEDED,
];

export class ErrorBody {
  @ApiProperty({ example: 404 }) statusCode!: number;
  @ApiProperty({
    example: 'NOT_FOUND',
    enum: Object.values(LoomErrorCode).filter((code) => !INTERNAL_CODES.includes(code)),
  })
  code!: string;
  @ApiProperty({ example: 'conversation not found' }) message!: string;
}

export class UsageView {
  @ApiProperty() promptTokens!: number;
  @ApiProperty() completionTokens!: number;
  @ApiProperty({ description: 'USD, priced with LLM_*_USD_PER_MTOK (0 when not priced)' })
  costUsd!: number;
}

export class ConversationView {
  @ApiProperty({ pattern: ID_PATTERN }) conversationId!: string;
  @ApiProperty({ type: String, nullable: true, description: 'Generated after the first turn' })
  title!: string | null;
  @ApiProperty({ enum: ConversationStatus }) status!: ConversationStatus;
  @ApiProperty({ type: String, nullable: true, example: 'labor-law' })
  currentIntent!: string | null;
  @ApiProperty({ type: [String], description: 'Tasks of turns still running' })
  activeTaskIds!: string[];
  @ApiProperty() messageCount!: number;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ format: 'date-time' }) lastActiveAt!: string;
  @ApiProperty({ type: UsageView, description: 'Every model call of the conversation, summed' })
  usage!: UsageView;
}

export class ConversationList {
  @ApiProperty({ type: [ConversationView], description: "The caller's own, newest first" })
  items!: ConversationView[];
  @ApiProperty({ type: String, nullable: true, description: 'Pass as ?cursor for the next page' })
  nextCursor!: string | null;
}

export class MessageView {
  @ApiProperty({ description: 'Contiguous from 1 within the conversation' }) seq!: number;
  @ApiProperty({ enum: ['user', 'assistant'] }) role!: 'user' | 'assistant';
  @ApiProperty() content!: string;
  @ApiProperty({ type: String, nullable: true, description: 'The agent that answered' })
  agentType!: string | null;
  @ApiProperty({ type: String, nullable: true }) taskId!: string | null;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
}

export class MessageList {
  @ApiProperty({ type: [MessageView], description: 'In seq order' }) items!: MessageView[];
}

export class TurnView {
  @ApiProperty() taskId!: string;
  @ApiProperty({ type: [String], description: 'The agents that answered, in order' })
  agents!: string[];
  @ApiProperty({ type: MessageView }) userMessage!: MessageView;
  @ApiProperty({ type: MessageView }) reply!: MessageView;
}

export class PlanStepView {
  @ApiProperty() agentType!: string;
  @ApiProperty() required!: boolean;
  @ApiProperty({ type: [String] }) dependsOn!: string[];
}

export class ContextView {
  @ApiProperty({ description: 'Conversation messages the agent was shown' })
  historyMessages!: number;
  @ApiProperty() summaryIncluded!: boolean;
  @ApiProperty({ type: [String], description: 'Task-shared keys it was shown' })
  sharedKeys!: string[];
}

export class ExecutionError {
  @ApiProperty() code!: string;
  @ApiProperty() message!: string;
}

export class ExecutionView {
  @ApiProperty() agentSessionId!: string;
  @ApiProperty() agentType!: string;
  @ApiProperty({ enum: ExecutionStatus }) status!: ExecutionStatus;
  @ApiProperty() attempts!: number;
  @ApiProperty({ format: 'date-time' }) startedAt!: string;
  @ApiProperty({ type: String, format: 'date-time', nullable: true })
  completedAt!: string | null;
  @ApiProperty({ type: ExecutionError, nullable: true }) error!: ExecutionError | null;
  @ApiProperty({ type: ContextView }) context!: ContextView;
}

export class SharedEntryView {
  @ApiProperty({
    description: 'Any JSON value',
    oneOf: [
      { type: 'string' },
      { type: 'number' },
      { type: 'boolean' },
      { type: 'object' },
      { type: 'array', items: {} },
    ],
  })
  value!: unknown;
  @ApiProperty({ description: 'The agent type that wrote it' }) writer!: string;
  @ApiProperty({ format: 'date-time' }) updatedAt!: string;
}

@ApiExtraModels(SharedEntryView)
export class TaskView {
  @ApiProperty() taskId!: string;
  @ApiProperty() conversationId!: string;
  @ApiProperty({ example: 'consultation' }) taskType!: string;
  @ApiProperty({ enum: TaskStatus }) status!: TaskStatus;
  @ApiProperty() userIntent!: string;
  @ApiProperty({ type: [PlanStepView] }) plan!: PlanStepView[];
  @ApiProperty({ type: [ExecutionView] }) executions!: ExecutionView[];
  @ApiProperty({
    type: 'object',
    additionalProperties: { $ref: getSchemaPath(SharedEntryView) },
    description: 'Task-shared context by key: the last write of each',
  })
  sharedContext!: Record<string, SharedEntryView>;
  @ApiProperty({ format: 'date-time' }) createdAt!: string;
  @ApiProperty({ type: String, format: 'date-time', nullable: true })
  completedAt!: string | null;
}

export class AgentView {
  @ApiProperty({ example: 'labor-law' }) agentType!: string;
  @ApiProperty() description!: string;
  @ApiProperty({ description: 'Live instances (a heartbeat within the last 15 s)' })
  instances!: number;
}

export class AgentList {
  @ApiProperty({ type: [AgentView] }) items!: AgentView[];
}
