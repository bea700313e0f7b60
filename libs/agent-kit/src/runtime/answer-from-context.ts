import type { SessionContext, Usage } from '@loom/session';
import { LlmError, withCost, type LlmMessage } from '../llm/llm.types';
import type { AgentTools } from './agent-handler';

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

/** A specialist's answer: the model, given the conversation so far and the task-shared data; streamed when asked. */
export async function answerFromContext(
  ctx: SessionContext,
  tools: AgentTools,
  role: string,
): Promise<{ answer: string; usage: Usage }> {
  const { messages, context } = promptFromContext(ctx, role, tools.language);
  const request = { purpose: 'answer' as const, messages, context };
  let res;
  if (tools.onDelta) {
    const stream = tools.llm.stream(request);
    for await (const delta of stream.deltas) tools.onDelta(delta);
    res = await stream.result;
  } else {
    res = await tools.llm.complete(request);
  }
  // A blank reply helps nobody (a content filter, a cut-off answer): the execution fails instead.
  if (!res.text.trim()) {
    const blank = new LlmError(
      'LLM answer request returned no text',
      undefined,
      'the model returned an empty answer',
    );
    blank.usage = res.usage;
    throw blank;
  }
  return { answer: res.text, usage: withCost(res.usage) };
}
