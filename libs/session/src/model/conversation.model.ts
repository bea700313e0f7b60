export enum ConversationStatus {
  ACTIVE = 'ACTIVE',
  INACTIVE = 'INACTIVE',
  ARCHIVED = 'ARCHIVED',
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  costUsd: number;
}

export interface UserProfile {
  displayName?: string;
  preferredLanguage?: string;
  preferredResponseStyle?: string;
  [k: string]: unknown;
}

/** The conversation layer (seed 000 ConversationSession + seed 002 tenancy, expiry and cost). */
export interface ConversationMeta {
  conversationId: string;
  tenantId: string;
  userId: string;
  systemId: string;
  title: string | null;
  status: ConversationStatus;
  currentIntent: string | null;
  language: string | null;
  userProfile: UserProfile;
  userContext: Record<string, unknown>;
  metadata: Record<string, unknown>;
  activeTaskIds: string[];
  usage: Usage;
  messageCount: number;
  createdAt: string;
  lastActiveAt: string;
  /** Durable expiry: idle this long and the sweeper removes the conversation. */
  expiresAt: string;
}

export type MessageRole = 'user' | 'assistant';

/** One entry of the append-only message log; `seq` is contiguous from 1 per conversation. */
export interface ConversationMessage {
  seq: number;
  role: MessageRole;
  content: string;
  agentType: string | null;
  taskId: string | null;
  createdAt: string;
  /** cl100k tokens of `content`, counted when the message was appended. */
  tokens: number;
}

/** A compaction of older turns; raw messages are never deleted (seed 001). */
export interface ConversationSummary {
  text: string;
  fromSeq: number;
  toSeq: number;
  createdAt: string;
}

export const emptyUsage = (): Usage => ({ promptTokens: 0, completionTokens: 0, costUsd: 0 });

export const addUsage = (a: Usage, b: Usage): Usage => ({
  promptTokens: a.promptTokens + b.promptTokens,
  completionTokens: a.completionTokens + b.completionTokens,
  costUsd: a.costUsd + b.costUsd,
});
