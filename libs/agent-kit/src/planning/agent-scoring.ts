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

/** `modifier` of another agent directly precedes `head` (劳动|合同, employment contract). */
function modifies(modifier: AgentHit, head: AgentHit, message: string): boolean {
  if (modifier.owner === head.owner || modifier.end > head.start) return false;
  return /^[\s-]*$/.test(message.slice(modifier.end, head.start));
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
  const allHits = hitsByAgent.flat();
  const stands = (hit: AgentHit) =>
    !allHits.some((other) => spans(other, hit) || modifies(other, hit, message));
  return agents.map((agent, i) => {
    const keywords = [...new Set(hitsByAgent[i].filter(stands).map((hit) => hit.keyword))];
    return { agent, score: keywords.length, keywords };
  });
}
