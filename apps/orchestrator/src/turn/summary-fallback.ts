import { firstSentence, LlmHistoryMessage, truncate } from '@loom/agent-kit';
import { countTokens } from '@loom/session';

/** A folded message's line: its first sentence, at most this many characters. */
const POINT_MAX_CHARS = 120;
/** Lines of the earlier summary always kept when the fallback must shrink: its oldest facts. */
const KEEP_FIRST = 4;
const OMITTED = '- …';

/**
 * The summary written when the model gives none that can be used (its call failed, or it
 * answered blank or past its length): the earlier summary with one line per newly folded
 * message (its first sentence), so the range is still covered and no message falls out of both
 * the summary and the agents' history. Within `maxTokens`, like a model's: past it, the lines
 * after the first few are dropped oldest first (the newest messages and the conversation's
 * opening stay); the next usable model summary folds it all again.
 */
export function fallbackSummary(
  previous: string | null,
  history: LlmHistoryMessage[],
  maxTokens: number,
): string {
  const earlier = (previous ?? '')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const points = history.map(
    (m) =>
      `- #${m.seq} ${m.agentType ?? m.role}: ${truncate(firstSentence(m.content), POINT_MAX_CHARS)}`,
  );
  return bounded([...earlier, ...points], maxTokens);
}

function bounded(lines: string[], maxTokens: number): string {
  const fits = (ls: string[]) => countTokens(ls.join('\n')) <= maxTokens;
  const out = [...lines];
  while (!fits(out) && out.length > KEEP_FIRST + 2) {
    if (out[KEEP_FIRST] !== OMITTED) out.splice(KEEP_FIRST, 0, OMITTED);
    out.splice(KEEP_FIRST + 1, 1);
  }
  let text = out.join('\n');
  // A few lines still too long (an earlier summary written as one paragraph): cut them.
  while (countTokens(text) > maxTokens) text = truncate(text, Math.floor(text.length * 0.9));
  return text;
}
