import { AgentDefinition } from '@loom/agent-kit';
import { CONTRACT_LAW_DESCRIPTOR } from './contract-law.descriptor';
import { ContractLawHandler } from './contract-law.handler';

/** Started as its own process by main.ts, and beside every other agent by the embedded profile. */
export const AGENT: AgentDefinition = {
  descriptor: CONTRACT_LAW_DESCRIPTOR,
  handler: ContractLawHandler,
};
