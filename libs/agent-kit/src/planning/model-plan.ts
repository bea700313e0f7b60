import type { LlmMessage } from '../llm/llm.types';
import { truncate } from '../llm/text';
import { agentsWithRole, intentOf, planSteps } from './rule-planner';
import type { Plan, PlanInput } from './planner.types';

const HISTORY_TURNS = 6;
const HISTORY_CHARS = 300;

/** The routing prompt: the registered agents, the recent conversation and the current intent. */
export function buildPlanPrompt(input: PlanInput): LlmMessage[] {
  const agents = input.agents.map(({ agentType, role, description, intents }) => ({
    agentType,
    role,
    description,
    intents,
  }));
  const history = input.history.slice(-HISTORY_TURNS).map((message) => ({
    role: message.role,
    agentType: message.agentType ?? undefined,
    content: truncate(message.content, HISTORY_CHARS),
  }));
  const system = [
    'You route a legal consultation to agents. The registered agents are:',
    JSON.stringify(agents),
    'Pick exactly one specialist for the latest user message, and the research agents that should run before it.',
    'A follow-up that refers to earlier turns ("that contract", "上面那份合同") stays with the current intent unless it clearly changes topic.',
    'Use only the agentType values listed. Answer with JSON only: {"intent": "<an intent of the chosen specialist>", "agents": ["<agentType>", ...]}',
  ].join('\n');
  const user = JSON.stringify({
    currentIntent: input.currentIntent,
    history,
    message: input.message,
  });
  return [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ];
}

function parseJsonObject(text: string): unknown {
  const start = text.indexOf('{');
  const end = text.lastIndexOf('}');
  if (start < 0 || end <= start) throw new Error('no JSON object');
  return JSON.parse(text.slice(start, end + 1));
}

/**
 * The model's routing answer checked against the registry: unknown agents are dropped, exactly
 * one specialist (the first named) is kept. Returns the reason of rejection when it is unusable.
 */
export function planFromModelAnswer(text: string, input: PlanInput): Plan | string {
  let answer: unknown;
  try {
    answer = parseJsonObject(text);
  } catch {
    return 'not JSON';
  }
  const { intent, agents } = (answer ?? {}) as { intent?: unknown; agents?: unknown };
  if (!Array.isArray(agents)) return 'no agents list';
  const named = agents.filter((agent): agent is string => typeof agent === 'string');
  const specialist = agentsWithRole(input.agents, 'specialist')
    .filter((agent) => named.includes(agent.agentType))
    .sort((a, b) => named.indexOf(a.agentType) - named.indexOf(b.agentType))[0];
  if (!specialist) return `no registered specialist among ${JSON.stringify(named.slice(0, 5))}`;
  const research = agentsWithRole(input.agents, 'research').filter((agent) =>
    named.includes(agent.agentType),
  );
  const chosenIntent =
    typeof intent === 'string' && specialist.intents.includes(intent)
      ? intent
      : intentOf(specialist);
  const dropped = named.filter((name) => !input.agents.some((agent) => agent.agentType === name));
  return {
    intent: chosenIntent,
    taskType: chosenIntent === input.currentIntent ? 'follow-up' : 'consultation',
    steps: planSteps(research, specialist),
    reason: `model chose ${specialist.agentType}${dropped.length ? `; dropped unknown ${dropped.join(', ')}` : ''}`,
  };
}
