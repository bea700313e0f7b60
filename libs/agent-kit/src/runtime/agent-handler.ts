import type { SessionContext, Usage } from '@loom/session';
import type { LlmClient } from '../llm/llm.types';

/** The one thing an agent app writes: how it answers, given its SessionContext. */
export interface AgentHandler {
  handle(
    ctx: SessionContext,
    tools: { llm: LlmClient; language: 'zh' | 'en' },
  ): Promise<{ answer: string; usage: Usage; sharedKeysWritten?: string[] }>;
}

export const AGENT_HANDLER = Symbol('AGENT_HANDLER');
export const AGENT_DESCRIPTOR = Symbol('AGENT_DESCRIPTOR');
