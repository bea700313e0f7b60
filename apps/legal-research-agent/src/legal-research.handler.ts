import { Injectable } from '@nestjs/common';
import { AgentHandler, AgentTools, searchStatutes } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';

export const RESEARCH_KEY = 'research.statutes';

/**
 * Finds the statutes relevant to the question (and, for a vague follow-up, to the earlier
 * questions) in the built-in corpus and writes them to task-shared context for the specialists.
 */
@Injectable()
export class LegalResearchHandler implements AgentHandler {
  async handle(ctx: SessionContext, tools: AgentTools) {
    const domain = ctx.task.intent.includes('labor')
      ? 'labor'
      : ctx.task.intent.includes('contract')
        ? 'contract'
        : undefined;
    const search = (q: string) =>
      searchStatutes(q, { limit: 3, domain: domain ? [domain, 'general'] : undefined });
    let found = search(ctx.question);
    if (found.length === 0) {
      const earlier = ctx.history
        .filter((m) => m.role === 'user')
        .map((m) => m.content)
        .join('\n');
      found = search(earlier);
    }
    const statutes = found.map((s) => ({
      id: s.id,
      title: s.title,
      law: s.law,
      article: s.article,
      summary: s.summary,
    }));
    await ctx.putSharedData(RESEARCH_KEY, statutes);
    const titles = statutes
      .map((s) => s.title[tools.language])
      .join(tools.language === 'zh' ? '、' : ', ');
    const answer = statutes.length
      ? tools.language === 'zh'
        ? `检索到相关法条：${titles}`
        : `Relevant statutes found: ${titles}`
      : tools.language === 'zh'
        ? '未检索到直接相关的法条'
        : 'No directly relevant statute found';
    return {
      answer,
      usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
      sharedKeysWritten: [RESEARCH_KEY],
    };
  }
}
