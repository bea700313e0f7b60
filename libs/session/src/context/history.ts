import { ConversationMessage } from '../model/conversation.model';
import { countTokens } from './token-counter';

/**
 * The last `maxTurns` turns (a turn is a user message and the reply after it), in seq order.
 * Counted by user messages, not as two messages each: a failed turn's question stays in the log
 * without a reply, and a turn never starts with a reply whose question was left out. Replies
 * before the oldest question (their question cut by the token budget) count as one turn.
 */
export function recentTurns(
  history: ConversationMessage[],
  maxTurns: number,
): ConversationMessage[] {
  let turns = 0;
  let start = history.length;
  while (start > 0 && turns < maxTurns) {
    // One turn: the replies at the end of what is left, and the user message before them.
    while (start > 0 && history[start - 1].role !== 'user') start--;
    if (start > 0) start--;
    turns++;
  }
  return history.slice(start);
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

/**
 * The history an agent is given (SessionContext): the messages after the summary's range, the
 * newest `maxMessages` of them within `historyTokens`. `maxMessages` is the compaction threshold,
 * so every message not yet summarised fits by count; the summariser folds what does not fit by
 * tokens (`compactionRange`).
 */
export const AGENT_HISTORY_BUDGET = { historyTokens: 3000, maxMessages: 30 } as const;

/**
 * The range to fold into the summary after a turn, or null. Over `threshold` messages everything
 * but the newest `keep` is folded (issue 3: over 30, keep the last 20). Below it, and among those
 * `keep`, a message that the next turn's agents would not see (`visible`: how many of the newest
 * messages past the summary fit their budget) is folded too, so each message is either in the
 * summary or in the history an agent sees.
 */
export function compactionRange(
  messageCount: number,
  summarizedToSeq: number,
  visible: number,
  rule: { threshold: number; keep: number },
): { fromSeq: number; toSeq: number } | null {
  const shown = messageCount > rule.threshold ? Math.min(rule.keep, visible) : visible;
  const toSeq = messageCount - shown;
  if (toSeq <= summarizedToSeq) return null;
  return { fromSeq: summarizedToSeq + 1, toSeq };
}

/**
 * The oldest messages whose tokens stay within `maxTokens` (at least one): what one summary call
 * folds, so a long backlog (an imported conversation, summaries that failed for a while) is
 * folded over several turns instead of overflowing the model's context in one prompt.
 */
export function oldestWithinBudget(
  messages: ConversationMessage[],
  maxTokens: number,
  count: (m: ConversationMessage) => number = (m) => m.tokens || countTokens(m.content),
): ConversationMessage[] {
  let used = 0;
  let n = 0;
  while (n < messages.length) {
    used += count(messages[n]);
    if (n > 0 && used > maxTokens) break;
    n++;
  }
  return messages.slice(0, n);
}
