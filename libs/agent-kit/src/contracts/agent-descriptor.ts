import type { AgentDescriptor } from '../planning/planner.types';

/** What an agent app declares about itself; the registry publishes it to orchestrators. */
export interface AgentRegistration extends AgentDescriptor {
  /** TCP endpoint (embedded profile only). */
  endpoint?: { host: string; port: number };
}

export interface RegisteredAgent {
  descriptor: AgentRegistration;
  instances: number;
}
