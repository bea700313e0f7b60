import { LoomError, LoomErrorCode } from '../errors/session-error';

/** A task-shared key: 1 to this many characters. */
export const MAX_SHARED_KEY_CHARS = 256;
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
