import { Tiktoken } from 'js-tiktoken/lite';

let encoder: Tiktoken | null = null;

/** Tokens of `text` with the cl100k_base BPE (a real tokenizer; the ranks ship in js-tiktoken). */
export function countTokens(text: string): number {
  if (!encoder) {
    // Loaded on first use: the ranks table is a few MB.
    const ranks = require('js-tiktoken/ranks/cl100k_base');
    encoder = new Tiktoken(ranks.default ?? ranks);
  }
  return encoder.encode(text, [], []).length;
}
