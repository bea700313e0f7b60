import { Injectable } from '@nestjs/common';
import { AgentHandler, AgentTools, answerFromContext } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';

/** Answers with the conversation so far and the statutes the research agent shared. */
@Injectable()
export class ContractLawHandler implements AgentHandler {
  handle(ctx: SessionContext, tools: AgentTools) {
    const role = tools.language === 'zh' ? '合同法专家' : 'Contract-law specialist';
    return answerFromContext(ctx, tools, role);
  }
}
