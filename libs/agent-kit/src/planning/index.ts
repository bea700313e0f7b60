export * from './planner.types';
export { Planner } from './planner';
export { planByRules, planSteps } from './rule-planner';
export { refersBack, scoreAgents, type AgentScore } from './agent-scoring';
export { buildPlanPrompt, planFromModelAnswer } from './model-plan';
