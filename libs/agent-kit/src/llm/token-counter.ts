import { countTokens } from '@loom/session';
import type { LlmMessage } from './llm.types';

/** Per-message framing tokens of the chat format (role markers), as OpenAI documents for cl100k. */
const TOKENS_PER_MESSAGE = 3;
const TOKENS_PER_REPLY_PRIMER = 3;

export { countTokens };

/** Prompt tokens of a chat request: every message's role and content plus the chat framing. */
export function countMessageTokens(messages: readonly LlmMessage[]): number {
  const body = messages.reduce(
    (sum, message) =>
      sum + TOKENS_PER_MESSAGE + countTokens(message.role) + countTokens(message.content),
    0,
  );
  return messages.length ? body + TOKENS_PER_REPLY_PRIMER : 0;
}
