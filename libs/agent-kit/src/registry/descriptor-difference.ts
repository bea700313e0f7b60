import { AgentRegistration } from '../contracts/agent-descriptor';

/** At most this many added or removed words are named, then how many more. */
const NAMED_WORDS = 5;

/**
 * How the descriptor in force differs from this instance's, in what planning reads (description,
 * role, intents, keywords; not the endpoint, which is each instance's own), or null when it
 * does not: `description; keywords +property -vat`.
 */
export function descriptorDifference(
  own: AgentRegistration,
  inForce: AgentRegistration,
): string | null {
  const parts: string[] = [];
  if (own.description !== inForce.description) parts.push('description');
  if (own.role !== inForce.role) parts.push(`role ${inForce.role}`);
  for (const field of ['intents', 'keywords'] as const) {
    const mine = new Set(own[field]);
    const theirs = new Set(inForce[field]);
    const words = [
      ...[...theirs].filter((w) => !mine.has(w)).map((w) => `+${w}`),
      ...[...mine].filter((w) => !theirs.has(w)).map((w) => `-${w}`),
    ];
    const more = words.length > NAMED_WORDS ? ` (${words.length - NAMED_WORDS} more)` : '';
    if (words.length) parts.push(`${field} ${words.slice(0, NAMED_WORDS).join(' ')}${more}`);
    else if (own[field].join('\n') !== inForce[field].join('\n')) parts.push(`${field} order`);
  }
  return parts.length ? parts.join('; ') : null;
}
