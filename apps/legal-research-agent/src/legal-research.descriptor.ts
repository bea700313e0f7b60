import { AgentRegistration } from '@loom/agent-kit';

export const LEGAL_RESEARCH_DESCRIPTOR: AgentRegistration = {
  agentType: 'legal-research',
  description:
    'Finds the statutes relevant to a legal question and shares them with the specialists',
  role: 'research',
  intents: ['legal-research'],
  keywords: [],
};
