import { Injectable } from '@nestjs/common';
import { AgentHandler, AgentTools, answerFromContext } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';

/** Answers with the conversation so far and the statutes the research agent shared. */
@Injectable()
export class LaborLawHandler implements AgentHandler {
  handle(ctx: SessionContext, tools: AgentTools) {
    const role = tools.language === 'zh' ? '劳动法专家' : 'Labour-law specialist';
    return answerFromContext(ctx, tools, role);
  }
}
