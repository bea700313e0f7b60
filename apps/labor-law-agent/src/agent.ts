import { AgentDefinition } from '@loom/agent-kit';
import { LABOR_LAW_DESCRIPTOR } from './labor-law.descriptor';
import { LaborLawHandler } from './labor-law.handler';

/** Started as its own process by main.ts, and beside every other agent by the embedded profile. */
export const AGENT: AgentDefinition = {
  descriptor: LABOR_LAW_DESCRIPTOR,
  handler: LaborLawHandler,
};
