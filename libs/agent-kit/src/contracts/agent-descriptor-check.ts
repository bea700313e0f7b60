import type { AgentRegistration } from './agent-descriptor';

/** An agent type as assignments carry it (AssignmentDto): stream names and keys are built on it. */
export const AGENT_TYPE_PATTERN = /^[a-z0-9-]{2,64}$/;
export const MAX_DESCRIPTION_CHARS = 1_000;
/** Keywords or intents of one agent, and the characters of each. */
export const MAX_DESCRIPTOR_WORDS = 200;
export const MAX_DESCRIPTOR_WORD_CHARS = 100;

const words = (x: unknown): x is string[] =>
  Array.isArray(x) &&
  x.length <= MAX_DESCRIPTOR_WORDS &&
  x.every((w) => typeof w === 'string' && w.length > 0 && w.length <= MAX_DESCRIPTOR_WORD_CHARS);

/**
 * What is wrong with an agent's descriptor, or null. Checked by the agent kit before an agent
 * starts, and by the orchestrator on what it reads from the registry: an agent may be any
 * program, and one malformed descriptor must not break the planning of every turn.
 */
export function descriptorProblem(d: unknown): string | null {
  if (typeof d !== 'object' || d === null) return 'not an object';
  const { agentType, description, role, intents, keywords } = d as Record<string, unknown>;
  if (typeof agentType !== 'string' || !AGENT_TYPE_PATTERN.test(agentType))
    return 'agentType: lower-case letters, digits and dashes, 2 to 64 characters';
  if (
    typeof description !== 'string' ||
    description.trim() === '' ||
    description.length > MAX_DESCRIPTION_CHARS
  )
    return `description: text of 1 to ${MAX_DESCRIPTION_CHARS} characters`;
  if (role !== 'research' && role !== 'specialist') return "role: 'research' or 'specialist'";
  const limits = `at most ${MAX_DESCRIPTOR_WORDS} strings of 1 to ${MAX_DESCRIPTOR_WORD_CHARS} characters`;
  if (!words(intents)) return `intents: ${limits}`;
  if (!words(keywords)) return `keywords: ${limits}`;
  return null;
}

/** `d` as a descriptor when it is a well-formed one, else null. */
export function wellFormedDescriptor(d: unknown): AgentRegistration | null {
  return descriptorProblem(d) === null ? (d as AgentRegistration) : null;
}
