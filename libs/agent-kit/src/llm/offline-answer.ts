import { hasCjk } from '../knowledge/keyword-match';
import { searchStatutes } from '../knowledge/statutes';
import type { LlmContext } from './llm.types';
import { citationsFromShared, type Citation } from './shared-citations';
import { squash, truncate, type Language } from './text';

const QUOTE_MAX = 60;

/** The most recent user question before the current one (the log may already hold the current one). */
export function earlierQuestion(context: LlmContext): string | null {
  const asked = context.history.filter((message) => message.role === 'user');
  const last = asked.at(-1);
  const prior =
    last && squash(last.content) === squash(context.question) ? asked.slice(0, -1) : asked;
  const earlier = prior.at(-1);
  return earlier ? truncate(squash(earlier.content), QUOTE_MAX) : null;
}

function speaker(context: LlmContext, language: Language): string {
  const role = context.role && (language === 'zh' || !hasCjk(context.role)) ? context.role : null;
  const name = role ?? context.agentType ?? (language === 'zh' ? '法律助手' : 'legal assistant');
  return language === 'zh' ? `【${name}】` : `[${name}]`;
}

function opening(context: LlmContext, language: Language): string {
  const question = truncate(squash(context.question), QUOTE_MAX);
  const earlier = earlierQuestion(context);
  const summary = context.summary ? truncate(squash(context.summary), QUOTE_MAX) : null;
  if (language === 'zh') {
    const basis = earlier
      ? `结合您前面提到的“${earlier}”,`
      : summary
        ? `结合此前的对话(${summary}),`
        : '';
    return `${speaker(context, language)}${basis}就您现在的问题“${question}”分析如下。`;
  }
  const basis = earlier
    ? `Building on what you said earlier: "${earlier}". `
    : summary
      ? `Building on our earlier conversation (${summary}). `
      : '';
  return `${speaker(context, language)} ${basis}On your current question, "${question}":`;
}

function citationLines(citations: Citation[], language: Language): string[] {
  const separator = language === 'zh' ? ':' : ': ';
  return citations.map(
    (citation, i) =>
      `${i + 1}. ${citation.title}${citation.summary ? separator + citation.summary : ''}`,
  );
}

function writersOf(citations: Citation[]): string {
  return [...new Set(citations.map((citation) => citation.writer))].join(', ');
}

const ADVICE: Record<Language, string> = {
  zh: '建议:请核对合同中相应条款的具体约定,保留合同文本、沟通记录等证据;与对方协商不成的,可依法申请仲裁或提起诉讼。',
  en: 'Advice: check the exact wording of the relevant clause, and keep the contract and your correspondence as evidence; if negotiation fails, you may apply for arbitration or go to court.',
};

/** A specialist's answer that visibly uses the earlier turns and the statutes other agents shared. */
export function composeAnswer(context: LlmContext, language: Language): string {
  const citations = citationsFromShared(context, language);
  const lines = [opening(context, language)];
  if (citations.length > 0) {
    const source = writersOf(citations);
    lines.push(
      language === 'zh'
        ? `相关法条(由 ${source} 检索提供):`
        : `Relevant statutes (found by ${source}):`,
    );
    lines.push(...citationLines(citations, language));
  } else {
    lines.push(
      language === 'zh'
        ? '暂无检索到的法条,以下为一般性意见。'
        : 'No statutes were shared for this question; general guidance follows.',
    );
  }
  lines.push(ADVICE[language]);
  return lines.join('\n');
}

/** A research note: statutes for the question, widened with the earlier question when needed. */
export function composeResearch(context: LlmContext, language: Language): string {
  const question = truncate(squash(context.question), QUOTE_MAX);
  const earlier = earlierQuestion(context);
  let statutes = searchStatutes(context.question, { limit: 4 });
  const widened = statutes.length === 0 && earlier !== null;
  if (widened) statutes = searchStatutes(`${earlier} ${context.question}`, { limit: 4 });
  const citations: Citation[] = statutes.map((statute) => ({
    title: statute.title[language],
    summary: statute.summary[language],
    writer: context.agentType ?? 'research',
  }));
  const shared = citationsFromShared(context, language);
  const found = citations.length > 0 ? citations : shared;
  if (found.length === 0) {
    return language === 'zh'
      ? `针对“${question}”,未检索到直接相关的法条。`
      : `No directly relevant statutes were found for "${question}".`;
  }
  const widenedNote = widened
    ? language === 'zh'
      ? `(结合前文“${earlier}”)`
      : ` (together with your earlier question "${earlier}")`
    : '';
  const head =
    language === 'zh'
      ? `针对“${question}”${widenedNote},检索到 ${found.length} 条相关法条:`
      : `For "${question}"${widenedNote}, ${found.length} relevant statute(s) were found:`;
  return [head, ...citationLines(found, language)].join('\n');
}
