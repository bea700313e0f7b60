// The CommonJS build, named directly: this repository resolves modules the classic Node way.
import { encode } from 'gpt-tokenizer/cjs/encoding/cl100k_base';
import { LRUCache } from 'lru-cache';

/**
 * Counts of recently seen texts. The same history messages are counted on every turn by every
 * agent (token budgets, prompt usage); BPE is the costliest CPU work of an offline turn, so a
 * text is encoded once per process. Bounded by total characters, not entries.
 */
const counted = new LRUCache<string, number>({
  maxSize: 4_000_000,
  sizeCalculation: (_n, text) => Math.max(text.length, 1),
});

/** Texts shorter than this are encoded directly: cheaper than hashing them into the cache. */
const MEMO_MIN_LENGTH = 16;

/**
 * Tokens of `text` under the cl100k_base BPE (a real tokenizer, not length / 4). gpt-tokenizer:
 * pure JavaScript, the same counts as tiktoken.
 */
export function countTokens(text: string): number {
  if (!text) return 0;
  if (text.length < MEMO_MIN_LENGTH) return encode(text, { disallowedSpecial: new Set() }).length;
  let n = counted.get(text);
  if (n === undefined) {
    n = encode(text, { disallowedSpecial: new Set() }).length;
    counted.set(text, n);
  }
  return n;
}
