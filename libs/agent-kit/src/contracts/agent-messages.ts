import { Type } from 'class-transformer';
import {
  IsBoolean,
  IsIn,
  IsInt,
  IsObject,
  IsOptional,
  IsString,
  Matches,
  MaxLength,
  ValidateNested,
} from 'class-validator';
import { detectPii } from '@loom/security';
import type { ContextReport, Usage } from '@loom/session';

/** Every message pattern lives here, imported by both sides. */
export const agentExecutePattern = (agentType: string): string => `agent.${agentType}.execute`;
export const agentHealthPattern = (agentType: string): string => `agent.${agentType}.health`;

/** Correlation fields the orchestrator stamps on every dispatch; agents restore them into CLS. */
export class DispatchMeta {
  @IsString() @MaxLength(128) correlationId!: string;
  @IsOptional() @IsString() @MaxLength(128) tenantId?: string;
  @IsOptional() @IsString() @MaxLength(128) conversationId?: string;
  @IsOptional() @IsString() @MaxLength(128) taskId?: string;
  @IsOptional() @IsString() @MaxLength(128) agentType?: string;
}

const ID = /^[A-Za-z0-9_-]{8,128}$/;
const PRINCIPAL = /^[A-Za-z0-9_.@|:+-]{1,128}$/;

export class AssignmentDto {
  @Matches(PRINCIPAL) tenantId!: string;
  @Matches(PRINCIPAL) userId!: string;
  @Matches(ID) conversationId!: string;
  @Matches(ID) taskId!: string;
  @Matches(ID) agentSessionId!: string;
  @Matches(/^[a-z0-9-]{2,64}$/) agentType!: string;
  @IsInt() expiresAt!: number;
  @Matches(/^[0-9a-f]{64}$/) signature!: string;
}

export class ExecuteAgentRequest {
  @ValidateNested() @Type(() => AssignmentDto) @IsObject() assignment!: AssignmentDto;
  @ValidateNested() @Type(() => DispatchMeta) @IsObject() meta!: DispatchMeta;
  @IsOptional() @IsIn(['zh', 'en']) language?: 'zh' | 'en';
  /** Publish the reply's text as it is produced (DeltaChannel), for an SSE client. */
  @IsOptional() @IsBoolean() stream?: boolean;
}

export interface ExecuteAgentResult {
  agentSessionId: string;
  agentType: string;
  agentId: string;
  output: string;
  sharedKeysWritten: string[];
  context: ContextReport;
  usage: Usage;
  /** True when this was a redelivery of finished work: the stored result, nothing re-run. */
  replayed: boolean;
  /**
   * The delivery that did the work (`SessionContext.delivery`): the orchestrator records it, and
   * only that delivery's task-shared writes are shown (an earlier, failed one's are not).
   */
  delivery?: string;
}

/**
 * The longest answer an execution may give, in characters (UTF-16 units, as `String.length`):
 * it is stored three times (the agent session, the task's record, the reply), and every later
 * turn's history reads it. The agent kit refuses a longer one, and so does the orchestrator.
 */
export const MAX_ANSWER_CHARS = 100_000;

/** An agent's error message is cut to this many characters before it is stored or answered. */
export const MAX_ERROR_MESSAGE_CHARS = 1_000;

/** How far either side of a cut PII is looked for (longer than any value it detects). */
const CUT_PII_WINDOW = 256;

/**
 * `message` cut to `max` characters (never inside a surrogate pair), marked when cut. Never
 * inside PII either (an error may quote what the user wrote): the cut moves to before it, since
 * half a resident id or phone number no longer looks like one to the redaction every log line
 * gets, and would be logged as it is.
 */
export function boundedMessage(message: string, max = MAX_ERROR_MESSAGE_CHARS): string {
  if (message.length <= max) return message;
  let end = /[\uD800-\uDBFF]/.test(message[max - 2] ?? '') ? max - 2 : max - 1;
  const from = Math.max(0, end - CUT_PII_WINDOW);
  for (const span of detectPii(message.slice(from, end + CUT_PII_WINDOW)))
    if (from + span.start < end && from + span.end > end) end = from + span.start;
  return `${message.slice(0, end)}…`;
}

/** The body of every RpcException an agent throws. */
export interface AgentRpcError {
  code: string;
  message: string;
}
