import { LoomError, LoomErrorCode } from '../errors/session-error';

/**
 * A value whose JSON text is made already: every backend stores that text. The tiered store
 * encodes a value once for all its tiers instead of once in each.
 */
export class EncodedValue {
  constructor(readonly json: string) {}
}

/** Values are stored as JSON text in every backend (state_data LONGTEXT, Redis strings, files). */
export function encodeValue(value: unknown): string {
  if (value instanceof EncodedValue) return value.json;
  if (value === undefined)
    throw new LoomError(LoomErrorCode.VALIDATION_FAILED, 'cannot store undefined');
  return JSON.stringify(value);
}

export function decodeValue<T>(text: string): T {
  return JSON.parse(text) as T;
}
