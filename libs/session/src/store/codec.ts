import { LoomError, LoomErrorCode } from '../errors/session-error';

/** Values are stored as JSON text in every backend (state_data LONGTEXT, Redis strings, files). */
export function encodeValue(value: unknown): string {
  if (value === undefined)
    throw new LoomError(LoomErrorCode.VALIDATION_FAILED, 'cannot store undefined');
  return JSON.stringify(value);
}

export function decodeValue<T>(text: string): T {
  return JSON.parse(text) as T;
}
