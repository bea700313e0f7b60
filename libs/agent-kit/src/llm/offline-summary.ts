import type { LlmContext, LlmHistoryMessage } from './llm.types';
import { firstSentence, makeTitle, squash, truncate, type Language } from './text';

const POINT_MAX = 80;
const KEEP_FIRST = 4;
const KEEP_LAST = 11;
const OMITTED = '- …';

function point(message: LlmHistoryMessage, language: Language): string {
  const who =
    message.role === 'user'
      ? language === 'zh'
        ? '用户'
        : 'user'
      : (message.agentType ?? (language === 'zh' ? '助手' : 'assistant'));
  const separator = language === 'zh' ? ':' : ': ';
  return `- #${message.seq} ${who}${separator}${truncate(firstSentence(message.content), POINT_MAX)}`;
}

function previousPoints(summary: string | null | undefined, language: Language): string[] {
  if (!summary?.trim()) return [];
  const bullets = summary.split('\n').filter((line) => line.startsWith('- '));
  if (bullets.length > 0) return bullets;
  const label = language === 'zh' ? '此前' : 'earlier';
  return [`- ${label}: ${truncate(squash(summary), POINT_MAX * 2)}`];
}

function bounded(points: string[]): string[] {
  if (points.length <= KEEP_FIRST + KEEP_LAST + 1) return points;
  const head = points.slice(0, KEEP_FIRST);
  const tail = points.slice(-KEEP_LAST).filter((line) => line !== OMITTED);
  return [...head, OMITTED, ...tail];
}

/**
 * A deterministic summary: one bullet per covered message (its first sentence), after the bullets
 * of the previous summary it folds in; the first and the latest points survive when it grows long.
 */
export function composeSummary(context: LlmContext, language: Language): string {
  const seqs = context.history.map((message) => message.seq);
  const fresh = context.history.map((message) => point(message, language));
  const points = bounded([...previousPoints(context.summary, language), ...fresh]);
  const range = seqs.length ? `#${Math.min(...seqs)}–#${Math.max(...seqs)}` : null;
  const head = language === 'zh' ? '对话摘要' : 'Conversation summary';
  const covers = range ? (language === 'zh' ? `(新增 ${range})` : ` (adds ${range})`) : '';
  return [`${head}${covers}${language === 'zh' ? ':' : ':'}`, ...points].join('\n');
}

/** A short title from the conversation's first question. */
export function composeTitle(context: LlmContext): string {
  const first = context.history.find((message) => message.role === 'user');
  return makeTitle(first?.content ?? context.question);
}
