import { Injectable } from '@nestjs/common';
import { AgentHandler, answerFromContext, LlmClient } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';

/** Answers with the conversation so far and the statutes the research agent shared. */
@Injectable()
export class ContractLawHandler implements AgentHandler {
  handle(ctx: SessionContext, tools: { llm: LlmClient; language: 'zh' | 'en' }) {
    const role = tools.language === 'zh' ? '合同法专家' : 'Contract-law specialist';
    return answerFromContext(ctx, tools.llm, role, tools.language);
  }
}
