import { CIVIL_CODE_STATUTES } from './civil-code-statutes';
import { findKeyword } from './keyword-match';
import { LABOR_STATUTES } from './labor-statutes';
import type { Statute, StatuteDomain } from './statute.types';

/** The built-in corpus: real articles of PRC labor and civil law, summarized in zh and en. */
export const STATUTES: readonly Statute[] = Object.freeze([
  ...LABOR_STATUTES,
  ...CIVIL_CODE_STATUTES,
]);

export interface StatuteSearchOptions {
  /** At most this many results (default 5). */
  limit?: number;
  /** Only statutes of this domain (or these domains). */
  domain?: StatuteDomain | StatuteDomain[];
}

interface Ranked {
  statute: Statute;
  hits: number;
  matchedLength: number;
  order: number;
}

/** The statute with this id, if the corpus has it. */
export function getStatute(id: string): Statute | undefined {
  return STATUTES.find((statute) => statute.id === id);
}

/**
 * Statutes whose keywords occur in `query`, best first: more distinct keyword hits, then longer
 * matched keywords, then corpus order. Deterministic; statutes without any hit are never returned.
 */
export function searchStatutes(query: string, opts: StatuteSearchOptions = {}): Statute[] {
  const limit = Math.max(0, opts.limit ?? 5);
  const domains = opts.domain === undefined ? null : [opts.domain].flat();
  const ranked: Ranked[] = [];
  STATUTES.forEach((statute, order) => {
    if (domains && !domains.includes(statute.domain)) return;
    const matched = statute.keywords.filter((keyword) => findKeyword(query, keyword).length > 0);
    if (matched.length === 0) return;
    const matchedLength = matched.reduce((sum, keyword) => sum + keyword.length, 0);
    ranked.push({ statute, hits: matched.length, matchedLength, order });
  });
  ranked.sort((a, b) => b.hits - a.hits || b.matchedLength - a.matchedLength || a.order - b.order);
  return ranked.slice(0, limit).map((entry) => entry.statute);
}
