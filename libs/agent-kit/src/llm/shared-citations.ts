import type { LlmContext } from './llm.types';
import type { Language } from './text';

export interface Citation {
  title: string;
  summary?: string;
  writer: string;
}

const CITATION_IN_TEXT = /《[^》\n]{1,30}》第[零一二三四五六七八九十百千\d]+条/g;
const MAX_DEPTH = 4;

function localized(value: unknown, language: Language): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    const text = (value as Record<string, unknown>)[language];
    if (typeof text === 'string') return text;
  }
  return undefined;
}

function collect(value: unknown, writer: string, language: Language, depth: number): Citation[] {
  if (depth > MAX_DEPTH || value === null || value === undefined) return [];
  if (typeof value === 'string') {
    return [...value.matchAll(CITATION_IN_TEXT)].map((match) => ({ title: match[0], writer }));
  }
  if (Array.isArray(value))
    return value.flatMap((item) => collect(item, writer, language, depth + 1));
  if (typeof value !== 'object') return [];
  const record = value as Record<string, unknown>;
  const title = localized(record.title, language);
  if (title) return [{ title, summary: localized(record.summary, language), writer }];
  return Object.values(record).flatMap((item) => collect(item, writer, language, depth + 1));
}

/**
 * Statutes other agents put into task-shared data: objects with a `title` (string or `{ zh, en }`)
 * and optional `summary`, or citations like 《劳动合同法》第二十三条 inside strings. Deduplicated by title.
 */
export function citationsFromShared(
  context: LlmContext,
  language: Language,
  limit = 6,
): Citation[] {
  const seen = new Set<string>();
  const citations: Citation[] = [];
  const keys = Object.keys(context.shared ?? {}).sort();
  for (const key of keys) {
    const { value, writer } = context.shared![key];
    for (const citation of collect(value, writer, language, 0)) {
      if (seen.has(citation.title)) continue;
      seen.add(citation.title);
      citations.push(citation);
    }
  }
  return citations.slice(0, limit);
}
