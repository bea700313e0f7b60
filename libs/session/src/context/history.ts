import { ConversationMessage } from '../model/conversation.model';
import { countTokens } from './token-counter';

/** The last `maxTurns` turns (a turn is a user message and its reply), in seq order. */
export function recentTurns(
  history: ConversationMessage[],
  maxTurns: number,
): ConversationMessage[] {
  return history.slice(Math.max(0, history.length - maxTurns * 2));
}

/**
 * Fills a token budget from the newest message backwards and returns the kept messages in seq
 * order (seed 002): the newest are kept first, order is preserved, the budget is never exceeded.
 */
export function withinTokenBudget(
  history: ConversationMessage[],
  maxTokens: number,
  count: (m: ConversationMessage) => number = (m) => m.tokens || countTokens(m.content),
): ConversationMessage[] {
  const kept: ConversationMessage[] = [];
  let used = 0;
  for (let i = history.length - 1; i >= 0; i--) {
    const cost = count(history[i]);
    if (used + cost > maxTokens) break;
    used += cost;
    kept.push(history[i]);
  }
  return kept.reverse();
}

/** Cuts a title to `max` user-perceived characters without splitting a surrogate pair or grapheme. */
export function truncateRuneSafe(text: string, max: number): string {
  const graphemes = Array.from(
    new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(text.trim()),
    (s) => s.segment,
  );
  if (graphemes.length <= max) return graphemes.join('');
  return `${graphemes.slice(0, Math.max(max - 1, 1)).join('')}…`;
}

/** Whether the log has grown past the compaction threshold beyond what the summary covers. */
export function needsCompaction(
  messageCount: number,
  summarizedToSeq: number,
  threshold: number,
  keep: number,
): { fromSeq: number; toSeq: number } | null {
  if (messageCount <= threshold) return null;
  const toSeq = messageCount - keep;
  if (toSeq <= summarizedToSeq) return null;
  return { fromSeq: summarizedToSeq + 1, toSeq };
}
