import type { SessionContext, Usage } from '@loom/session';
import type { LlmClient, LlmMessage } from '../llm/llm.types';

/** Prompt messages and structured context for a model call from what the agent was shown. */
export function promptFromContext(ctx: SessionContext, role: string, language: 'zh' | 'en') {
  const messages: LlmMessage[] = [
    { role: 'system', content: ctx.buildSystemPrompt(role) },
    ...ctx.history.map((m) => ({ role: m.role, content: m.content }) as LlmMessage),
    { role: 'user', content: ctx.question },
  ];
  const context = {
    agentType: ctx.assignment.agentType,
    role,
    question: ctx.question,
    history: ctx.history.map((m) => ({
      seq: m.seq,
      role: m.role,
      content: m.content,
      agentType: m.agentType,
    })),
    summary: ctx.summary?.text ?? null,
    shared: Object.fromEntries(
      Object.entries(ctx.shared).map(([k, v]) => [k, { value: v.value, writer: v.writer }]),
    ),
    language,
  };
  return { messages, context };
}

/** A specialist's answer: the model, given the conversation so far and the task-shared data. */
export async function answerFromContext(
  ctx: SessionContext,
  llm: LlmClient,
  role: string,
  language: 'zh' | 'en',
): Promise<{ answer: string; usage: Usage }> {
  const { messages, context } = promptFromContext(ctx, role, language);
  const res = await llm.complete({ purpose: 'answer', messages, context });
  return { answer: res.text, usage: { ...res.usage, costUsd: 0 } };
}
