import { refersBack, scoreAgents, type AgentScore } from './agent-scoring';
import {
  GENERAL_INTENT,
  type AgentDescriptor,
  type Plan,
  type PlanInput,
  type PlanStep,
} from './planner.types';

/** Agents of one role, one per agentType, in agentType order (registry order is not stable). */
export function agentsWithRole(
  agents: readonly AgentDescriptor[],
  role: AgentDescriptor['role'],
): AgentDescriptor[] {
  const byType = new Map<string, AgentDescriptor>();
  for (const agent of agents)
    if (agent.role === role && !byType.has(agent.agentType)) byType.set(agent.agentType, agent);
  return [...byType.values()].sort((a, b) => a.agentType.localeCompare(b.agentType));
}

export function intentOf(agent: AgentDescriptor): string {
  return agent.intents[0] ?? agent.agentType;
}

/** Research agents first (optional), then the specialist (required) that depends on them. */
export function planSteps(research: AgentDescriptor[], specialist?: AgentDescriptor): PlanStep[] {
  const researchSteps = research.map((agent) => ({
    agentType: agent.agentType,
    required: !specialist,
    dependsOn: [],
  }));
  if (!specialist) return researchSteps;
  const dependsOn = research.map((agent) => agent.agentType);
  return [...researchSteps, { agentType: specialist.agentType, required: true, dependsOn }];
}

/**
 * The intent in force: the given one, else the one of the specialist that answered last. Also
 * when no specialist serves the given intent any more but the one that answered still runs: a
 * deploy renamed its intents, and its conversations' follow-ups stay with it.
 */
function currentSpecialist(input: PlanInput, specialists: AgentDescriptor[]) {
  if (input.currentIntent) {
    const agent = specialists.find((candidate) => candidate.intents.includes(input.currentIntent!));
    if (agent) return { agent, intent: input.currentIntent };
    if (input.currentIntent === GENERAL_INTENT) return null;
  }
  const lastAnswer = [...input.history]
    .reverse()
    .find((m) => m.role === 'assistant' && m.agentType);
  const agent = specialists.find((candidate) => candidate.agentType === lastAnswer?.agentType);
  return agent ? { agent, intent: intentOf(agent) } : null;
}

function bestOf(scores: AgentScore[]): AgentScore | undefined {
  return scores.reduce<AgentScore | undefined>(
    (best, s) => (s.score > (best?.score ?? 0) ? s : best),
    undefined,
  );
}

const quoted = (words: string[]) => words.map((word) => `"${word}"`).join(', ');

/**
 * Keyword routing. A message stays with the current intent unless another specialist matches it
 * decisively: more keywords than the current one, and one more still when the message refers back
 * ("上面那份合同", "that contract"). With no match and no current intent the plan only researches
 * (intent 'general'); without research agents it falls to the first specialist by agentType.
 */
export function planByRules(input: PlanInput, preface = ''): Plan {
  const specialists = agentsWithRole(input.agents, 'specialist');
  const research = agentsWithRole(input.agents, 'research');
  const scores = scoreAgents(input.message, specialists);
  const best = bestOf(scores);
  const current = currentSpecialist(input, specialists);
  const backReference = refersBack(input.message);

  if (current) {
    const currentScore = scores.find((s) => s.agent === current.agent)?.score ?? 0;
    const margin = backReference ? 1 : 0;
    if (!best || best.agent === current.agent || best.score <= currentScore + margin) {
      const why = backReference
        ? `refers back ("${backReference}")`
        : 'no decisive keyword for another specialist';
      return {
        intent: current.intent,
        taskType: 'follow-up',
        steps: planSteps(research, current.agent),
        reason: `${preface}follow-up ${why}: stays with ${current.agent.agentType} (intent ${current.intent})`,
      };
    }
  }
  if (best) {
    return {
      intent: intentOf(best.agent),
      taskType: 'consultation',
      steps: planSteps(research, best.agent),
      reason: `${preface}keywords ${quoted(best.keywords)} matched ${best.agent.agentType}`,
    };
  }
  const fallback = research.length ? undefined : specialists[0];
  return {
    intent: fallback ? intentOf(fallback) : GENERAL_INTENT,
    taskType: fallback ? 'consultation' : 'research',
    steps: planSteps(research, fallback),
    reason: `${preface}no specialist keyword matched and no current intent: ${fallback ? `default ${fallback.agentType}` : 'research only'}`,
  };
}
