import { Tiktoken, type TiktokenBPE } from 'js-tiktoken/lite';
import type { LlmMessage } from './llm.types';

/** Per-message framing tokens of the chat format (role markers), as OpenAI documents for cl100k. */
const TOKENS_PER_MESSAGE = 3;
const TOKENS_PER_REPLY_PRIMER = 3;

let encoder: Tiktoken | undefined;

function getEncoder(): Tiktoken {
  if (!encoder) {
    // A plain require: the ranks entry point is only typed under the `exports` map, which the
    // repository's `moduleResolution: node` does not read.
    const ranks = require('js-tiktoken/ranks/cl100k_base') as
      TiktokenBPE | { default: TiktokenBPE };
    encoder = new Tiktoken('default' in ranks ? ranks.default : ranks);
  }
  return encoder;
}

/** Tokens of `text` under cl100k_base; special-token markers in user text count as plain text. */
export function countTokens(text: string): number {
  return text ? getEncoder().encode(text, [], []).length : 0;
}

/** Prompt tokens of a chat request: every message's role and content plus the chat framing. */
export function countMessageTokens(messages: readonly LlmMessage[]): number {
  const body = messages.reduce(
    (sum, message) =>
      sum + TOKENS_PER_MESSAGE + countTokens(message.role) + countTokens(message.content),
    0,
  );
  return messages.length ? body + TOKENS_PER_REPLY_PRIMER : 0;
}
