import { LoomError, LoomErrorCode } from '../errors/session-error';

/** A task-shared key: 1 to this many characters. */
export const MAX_SHARED_KEY_CHARS = 256;
/**
 * A task-shared key is an identifier, not text: letters, digits and `_ . : -` (as LOOM_SHARED_ACL
 * names keys), so no e-mail address, name or sentence reaches the task, its audit trail and the
 * logs under it (stored redaction covers values, never key names).
 */
export const SHARED_KEY_PATTERN = new RegExp(`^[A-Za-z0-9_.:-]{1,${MAX_SHARED_KEY_CHARS}}$`);
/** One shared value, in characters of its JSON: every later agent's prompt may carry it. */
export const MAX_SHARED_VALUE_JSON_CHARS = 256 * 1024;
/** Distinct shared keys in one task. */
export const MAX_SHARED_KEYS = 100;
/** An agent session's private memory (`remember`), in characters of its JSON. */
export const MAX_MEMORY_JSON_CHARS = 1024 * 1024;

/**
 * Characters of `value` as JSON (0 for `undefined`, which JSON leaves out). A value JSON cannot
 * hold (a BigInt, a cycle) is VALIDATION_FAILED now, not a failed write later.
 */
export function jsonChars(value: unknown, what: string): number {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch {
    throw new LoomError(
      LoomErrorCode.VALIDATION_FAILED,
      `${what} cannot be stored as JSON (a BigInt, or an object that contains itself)`,
    );
  }
  return json?.length ?? 0;
}

/** PAYLOAD_TOO_LARGE naming what is over which limit. */
export function tooLarge(what: string, chars: number, limit: number): LoomError {
  return new LoomError(
    LoomErrorCode.PAYLOAD_TOO_LARGE,
    `${what} is ${chars} characters of JSON, over the limit of ${limit}`,
  );
}

/** The parts of an agent session its handler may fill, each bounded like private memory. */
const PRIVATE_PARTS = [
  { field: 'localMemory', what: 'private memory', list: false },
  { field: 'messages', what: 'private messages', list: true },
  { field: 'toolCalls', what: 'tool calls', list: true },
] as const;

/**
 * What is wrong with an agent session's private state as its handler left it, or null: its
 * memory must be an object, its private messages and tool calls lists, each at most
 * MAX_MEMORY_JSON_CHARS of JSON and one JSON can hold. `remember()` bounds the memory as it is
 * written; a handler can also assign `ctx.agent`'s fields directly, so the saved state is
 * checked again, as a whole, before it is stored. `parts` names those that are wrong.
 */
export function privateStateProblem(agent: {
  localMemory?: unknown;
  messages?: unknown;
  toolCalls?: unknown;
}): { message: string; parts: Array<'localMemory' | 'messages' | 'toolCalls'> } | null {
  const problems: string[] = [];
  const parts: Array<'localMemory' | 'messages' | 'toolCalls'> = [];
  for (const { field, what, list } of PRIVATE_PARTS) {
    const value = agent[field];
    let problem: string | null = null;
    if (list ? !Array.isArray(value) : !isRecord(value))
      problem = `${what} that is not ${list ? 'a list' : 'an object'}`;
    else {
      try {
        const chars = jsonChars(value, what);
        if (chars > MAX_MEMORY_JSON_CHARS)
          problem = `${what} of ${chars} characters of JSON, over the limit of ${MAX_MEMORY_JSON_CHARS}`;
      } catch {
        problem = `${what} that cannot be stored as JSON (a BigInt, or an object that contains itself)`;
      }
    }
    if (problem) {
      problems.push(problem);
      parts.push(field);
    }
  }
  return problems.length ? { message: problems.join('; '), parts } : null;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
