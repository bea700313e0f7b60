import { AgentDefinition } from '@loom/agent-kit';
import { LEGAL_RESEARCH_DESCRIPTOR } from './legal-research.descriptor';
import { LegalResearchHandler } from './legal-research.handler';

/** Started as its own process by main.ts, and beside every other agent by the embedded profile. */
export const AGENT: AgentDefinition = {
  descriptor: LEGAL_RESEARCH_DESCRIPTOR,
  handler: LegalResearchHandler,
};
