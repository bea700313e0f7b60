import { LRUCache } from 'lru-cache';

/** One occurrence of a keyword in a text, as UTF-16 offsets into that text. */
export interface KeywordHit {
  keyword: string;
  start: number;
  end: number;
}

const CJK = /[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]/;
const ENGLISH_SUFFIXES = '(?:s|es|ed|d|ing)?';
/**
 * How many keywords' compiled patterns are kept: those matched lately. The keywords are the
 * registered agents' (and the statutes'): up to MAX_DESCRIPTOR_WORDS per agent type in force,
 * room for 50 types' before one in use is dropped (each turn matches all of them: a bound below
 * that would compile them again on every turn). Every deploy that changes a descriptor brings
 * new ones and the old are never matched again, so one per keyword ever seen would grow for as
 * long as the process runs. A keyword dropped is compiled again once.
 */
export const KEYWORD_PATTERNS_KEPT = 10_000;
const patternCache = new LRUCache<string, RegExp>({ max: KEYWORD_PATTERNS_KEPT });

/** How many keywords' patterns are held now (for tests). */
export function keywordPatternsCached(): number {
  return patternCache.size;
}

/** True when the text contains Chinese (or other CJK) characters. */
export function hasCjk(text: string): boolean {
  return CJK.test(text);
}

function wordPattern(keyword: string): RegExp {
  let pattern = patternCache.get(keyword);
  if (!pattern) {
    const body = keyword
      .trim()
      .split(/[-\s]+/)
      .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
      .join('[-\\s]?');
    pattern = new RegExp(`(?<![a-z0-9])${body}${ENGLISH_SUFFIXES}(?![a-z0-9])`, 'gi');
    patternCache.set(keyword, pattern);
  }
  pattern.lastIndex = 0;
  return pattern;
}

/**
 * Every occurrence of `keyword` in `text`, case-insensitive. CJK keywords match as substrings;
 * other keywords match whole words, tolerating plural/past endings and `non-compete`/`non compete`.
 * A keyword of dashes and spaces alone matches nothing.
 */
export function findKeyword(text: string, keyword: string): KeywordHit[] {
  // Blank, or dashes alone: no word to match (its pattern would match the empty text everywhere).
  if (!/[^-\s]/.test(keyword)) return [];
  const hits: KeywordHit[] = [];
  if (hasCjk(keyword)) {
    const haystack = text.toLowerCase();
    const needle = keyword.toLowerCase();
    for (let at = haystack.indexOf(needle); at >= 0; at = haystack.indexOf(needle, at + 1)) {
      hits.push({ keyword, start: at, end: at + needle.length });
    }
    return hits;
  }
  for (const match of text.matchAll(wordPattern(keyword))) {
    hits.push({ keyword, start: match.index, end: match.index + match[0].length });
  }
  return hits;
}

/** The keywords (deduplicated, in the given order) that occur in `text`. */
export function matchedKeywords(text: string, keywords: readonly string[]): string[] {
  return [...new Set(keywords)].filter((keyword) => findKeyword(text, keyword).length > 0);
}
