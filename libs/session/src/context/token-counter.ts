// The CommonJS build, named directly: this repository resolves modules the classic Node way.
import { encode } from 'gpt-tokenizer/cjs/encoding/cl100k_base';

/**
 * Tokens of `text` under the cl100k_base BPE (a real tokenizer, not length / 4). gpt-tokenizer:
 * pure JavaScript, the same counts as tiktoken, fast enough to run on every message.
 */
export function countTokens(text: string): number {
  return text ? encode(text, { disallowedSpecial: new Set() }).length : 0;
}
