import type { LlmUsage } from '../llm/llm.types';

/** What an agent app registers about itself; the planner routes from these alone. */
export interface AgentDescriptor {
  agentType: string;
  description: string;
  role: 'research' | 'specialist';
  intents: string[];
  keywords: string[];
}

export interface PlanStep {
  agentType: string;
  required: boolean;
  dependsOn: string[];
}

export interface Plan {
  intent: string;
  /** 'consultation' (a new topic), 'follow-up' (stays with the current intent) or 'research'. */
  taskType: string;
  steps: PlanStep[];
  reason: string;
  /** What the model call cost when a model was asked (even if its answer was not used). */
  usage?: LlmUsage;
}

export interface PlanInput {
  message: string;
  history: Array<{ role: 'user' | 'assistant'; content: string; agentType?: string | null }>;
  currentIntent: string | null;
  agents: AgentDescriptor[];
}

/** The intent of a plan that only researches, when no specialist fits and none is current. */
export const GENERAL_INTENT = 'general';
