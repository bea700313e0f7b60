import { hasCjk } from '../knowledge/keyword-match';

export type Language = 'zh' | 'en';

const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/** zh when the text has CJK characters, en when it has Latin letters, else `fallback`. */
export function detectLanguage(text: string, fallback: Language = 'en'): Language {
  if (hasCjk(text)) return 'zh';
  return /[a-z]/i.test(text) ? 'en' : fallback;
}

/** User-perceived characters: never splits a surrogate pair, an emoji sequence or a CJK char. */
export function graphemes(text: string): string[] {
  return Array.from(segmenter.segment(text), (segment) => segment.segment);
}

/**
 * At most `max` graphemes, ending in `…` when something was cut. Segments no further than that:
 * a whole 32,000-character message took about 150 ms of the event loop to segment.
 */
export function truncate(text: string, max: number): string {
  // A grapheme is at least one UTF-16 unit.
  if (text.length <= max) return text;
  const kept: string[] = [];
  for (const { segment } of segmenter.segment(text)) {
    if (kept.length === max) return `${kept.slice(0, Math.max(0, max - 1)).join('')}…`;
    kept.push(segment);
  }
  return text;
}

/** Whitespace collapsed to single spaces. */
export function squash(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** The first sentence (up to and including its end mark) of a squashed text. */
export function firstSentence(text: string): string {
  const flat = squash(text);
  const end = flat.search(/[。!?!?;;](?=.)|[.](?=\s)/u);
  return end >= 0 ? flat.slice(0, end + 1) : flat;
}

/** A conversation title: the first sentence, without trailing punctuation, ≤ `max` graphemes. */
export function makeTitle(text: string, max = 60): string {
  const sentence = firstSentence(text).replace(/[\s。.!?!?,,;;::、]+$/u, '');
  return truncate(sentence || squash(text), max);
}

/** Splits text into about `parts` chunks on grapheme boundaries (for simulated streaming). */
export function chunkText(text: string, parts: number): string[] {
  const chars = graphemes(text);
  const size = Math.max(1, Math.ceil(chars.length / Math.max(1, parts)));
  const chunks: string[] = [];
  for (let at = 0; at < chars.length; at += size) chunks.push(chars.slice(at, at + size).join(''));
  return chunks;
}
