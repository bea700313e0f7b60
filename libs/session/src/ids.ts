import { randomBytes } from 'crypto';
import { LoomError, LoomErrorCode } from './errors/session-error';

/** Every id that reaches a file path, a Redis key, a query or a log matches this. */
export const ID_PATTERN = /^[A-Za-z0-9_-]{8,128}$/;

/** Throws INVALID_ID unless `value` is a safe id; never echoes the raw value (it may be 10 KB or hold NUL). */
export function assertId(value: unknown, what = 'id'): string {
  if (typeof value !== 'string' || !ID_PATTERN.test(value)) {
    throw new LoomError(LoomErrorCode.INVALID_ID, `${what} must match ${ID_PATTERN.source}`);
  }
  return value;
}

export function isValidId(value: unknown): value is string {
  return typeof value === 'string' && ID_PATTERN.test(value);
}

/** A server-issued id: 144 random bits from the CSPRNG, base64url, with a readable prefix. */
export function newId(prefix: 'c' | 't' | 'a' | 'm' | 'r' | 'd' = 'c'): string {
  return `${prefix}_${randomBytes(18).toString('base64url')}`;
}

/** State keys are ours, not users', but they still end up in paths and keys. */
export const STATE_KEY_PATTERN = /^[A-Za-z0-9_.:-]{1,160}$/;

export function assertStateKey(value: unknown): string {
  if (typeof value !== 'string' || !STATE_KEY_PATTERN.test(value) || value.includes('..')) {
    throw new LoomError(
      LoomErrorCode.INVALID_ID,
      `state key must match ${STATE_KEY_PATTERN.source}`,
    );
  }
  return value;
}

/**
 * Tenant and user ids come from verified tokens; they still end up in keys and queries. Wide
 * enough for identity providers' subjects (`auth0|5f7c…`, `google-oauth2:123`, emails).
 */
export const PRINCIPAL_PATTERN = /^[A-Za-z0-9_.@|:+-]{1,128}$/;

export function assertPrincipal(value: unknown, what = 'principal'): string {
  if (typeof value !== 'string' || !PRINCIPAL_PATTERN.test(value)) {
    throw new LoomError(LoomErrorCode.INVALID_ID, `${what} must match ${PRINCIPAL_PATTERN.source}`);
  }
  return value;
}
