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
  if (text.length < MEMO_MIN_LENGTH) return encodedLength(text);
  let n = counted.get(text);
  if (n === undefined) {
    n = 0;
    for (const piece of pieces(text)) n += encodedLength(piece);
    counted.set(text, n);
  }
  return n;
}

/**
 * BPE merging is quadratic in the length of one pre-token, and a run without spaces (CJK text,
 * "aaaa…") is one pre-token: a single 32,000-character message took seconds of the event loop
 * (minutes for some texts), stalling every request of the process. Texts are counted in pieces
 * of at most PIECE characters, cut at a space where there is one (where the tokenizer splits
 * anyway), so normal text counts exactly and the worst case stays linear. A cut inside a run
 * can change the count by a token.
 */
const PIECE = 256;

/** Exported for its test: the pieces a text is counted in. */
export function* pieces(text: string): Generator<string> {
  for (let start = 0; start < text.length;) {
    let end = Math.min(start + PIECE, text.length);
    if (end < text.length) {
      const space = text.lastIndexOf(' ', end);
      if (space > start) end = space;
      else if (isHighSurrogate(text.charCodeAt(end - 1))) end--; // never split a character
    }
    yield text.slice(start, end);
    start = end;
  }
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;

const encodedLength = (text: string) => encode(text, { disallowedSpecial: new Set() }).length;
