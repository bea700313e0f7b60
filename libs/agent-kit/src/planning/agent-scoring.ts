import { findKeyword, type KeywordHit } from '../knowledge/keyword-match';
import type { AgentDescriptor } from './planner.types';

export interface AgentScore {
  agent: AgentDescriptor;
  /** Distinct keywords with at least one occurrence not inside a longer matched keyword. */
  score: number;
  keywords: string[];
}

/** Words that point back at earlier turns ("上面那份合同", "that contract", "it"). */
const REFERS_BACK = [
  ...['上面', '上述', '那份', '这份', '刚才', '前面', '之前', '该合同', '这个合同', '那个合同'],
  ...['这条', '那条', '这一条', '这个条款', '那个条款'],
  ...['the above', 'above', 'that contract', 'this contract', 'that agreement', 'this clause'],
  ...['that clause', 'it', 'earlier', 'previous', 'same contract', 'mentioned'],
];

/** The word by which the message refers back to something said before, or null. */
export function refersBack(message: string): string | null {
  return REFERS_BACK.find((word) => findKeyword(message, word).length > 0) ?? null;
}

interface AgentHit extends KeywordHit {
  owner: number;
}

/** `outer` spans `inner` with a longer keyword (劳动合同 over 合同). */
function spans(outer: KeywordHit, inner: KeywordHit): boolean {
  const longer = outer.end - outer.start > inner.end - inner.start;
  return longer && outer.start <= inner.start && outer.end >= inner.end;
}

/** What may stand between a modifier and its head: nothing, spaces or hyphens. */
const GAP = /[\s-]/;

/** The first index of `hits` (sorted by `at`) whose `at` is at least `value`. */
function firstFrom(hits: AgentHit[], at: (hit: AgentHit) => number, value: number): number {
  let [lo, hi] = [0, hits.length];
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (at(hits[mid]) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Whether a hit stands: no longer keyword spans it (合同 in 劳动合同), and no other agent's keyword
 * directly precedes it as its modifier (合同 after 劳动, "contract" after "employment"). Looks
 * only at the hits near each one, found by binary search, not at every other hit: a message
 * repeating keywords has tens of thousands of hits, and comparing every pair of them kept the
 * event loop busy for most of a minute.
 */
function standing(message: string, hits: AgentHit[]): (hit: AgentHit) => boolean {
  const byStart = [...hits].sort((a, b) => a.start - b.start);
  const byEnd = [...hits].sort((a, b) => a.end - b.end);
  const longest = hits.reduce((max, h) => Math.max(max, h.end - h.start), 0);
  // gapStart[i]: where the run of spaces and hyphens that ends just before i begins.
  const gapStart = new Int32Array(message.length + 1);
  for (let i = 1; i <= message.length; i++)
    gapStart[i] = GAP.test(message[i - 1]) ? gapStart[i - 1] : i;
  return (hit) => {
    // A hit spanning this one starts at most `longest` before this one ends.
    for (let i = firstFrom(byStart, (h) => h.start, hit.end - longest); i < byStart.length; i++) {
      if (byStart[i].start > hit.start) break;
      if (spans(byStart[i], hit)) return false;
    }
    // A modifier ends where the gap before this hit begins, or within it. A CJK hit is found in
    // the lower-cased text, which 'İ' lengthens: one past the message's end reads the text
    // between as message.slice does, up to the message's end.
    const gap = gapStart[Math.min(hit.start, message.length)];
    for (let i = firstFrom(byEnd, (h) => h.end, gap); i < byEnd.length; i++) {
      if (byEnd[i].end > hit.start) break;
      if (byEnd[i].owner !== hit.owner) return false;
    }
    return true;
  };
}

/**
 * Keyword scores of the agents for a message. The more specific reading wins: a keyword inside a
 * longer matched keyword does not count (合同 in 劳动合同), nor does the head of a compound whose
 * modifier is another agent's keyword (合同 after 劳动, "contract" after "employment").
 */
export function scoreAgents(message: string, agents: readonly AgentDescriptor[]): AgentScore[] {
  const hitsByAgent: AgentHit[][] = agents.map((agent, owner) =>
    [...new Set(agent.keywords)].flatMap((keyword) =>
      findKeyword(message, keyword).map((hit) => ({ ...hit, owner })),
    ),
  );
  const stands = standing(message, hitsByAgent.flat());
  return agents.map((agent, i) => {
    const keywords = new Set<string>();
    // A keyword counts once: its first standing hit settles it.
    for (const hit of hitsByAgent[i])
      if (!keywords.has(hit.keyword) && stands(hit)) keywords.add(hit.keyword);
    return { agent, score: keywords.size, keywords: [...keywords] };
  });
}
