/** Codes shared by every Loom service; the edges map them to HTTP statuses or RPC errors. */
export enum LoomErrorCode {
  UNAUTHENTICATED = 'UNAUTHENTICATED',
  VALIDATION_FAILED = 'VALIDATION_FAILED',
  INVALID_ID = 'INVALID_ID',
  NOT_FOUND = 'NOT_FOUND',
  PAYLOAD_TOO_LARGE = 'PAYLOAD_TOO_LARGE',
  METHOD_NOT_ALLOWED = 'METHOD_NOT_ALLOWED',
  /** A body in a media type or charset the API does not read (415). */
  UNSUPPORTED_MEDIA_TYPE = 'UNSUPPORTED_MEDIA_TYPE',
  /** Request headers past Node's limit (431), answered before any route runs. */
  HEADERS_TOO_LARGE = 'HEADERS_TOO_LARGE',
  /** A request not received whole within the server's time limit (408). */
  REQUEST_TIMEOUT = 'REQUEST_TIMEOUT',
  CONFLICT = 'CONFLICT',
  STALE_FENCING_TOKEN = 'STALE_FENCING_TOKEN',
  LOCK_TIMEOUT = 'LOCK_TIMEOUT',
  RATE_LIMITED = 'RATE_LIMITED',
  UNAVAILABLE = 'UNAVAILABLE',
  TIMEOUT = 'TIMEOUT',
  AGENT_FAILED = 'AGENT_FAILED',
  /**
   * The transport gave up on an agent request delivered too often without an answer (a poison
   * message, AGENT_MAX_DELIVERIES): 502, and not worth a retry, which would run it again.
   */
  DEAD_LETTERED = 'DEAD_LETTERED',
  ASSIGNMENT_REJECTED = 'ASSIGNMENT_REJECTED',
  ACCESS_DENIED = 'ACCESS_DENIED',
  /** An agent execution's claim was taken over by another delivery (never reaches HTTP). */
  SUPERSEDED = 'SUPERSEDED',
  INTERNAL = 'INTERNAL',
}

/** A domain error: carries a code, never a stack or secret in its message. */
export class LoomError extends Error {
  constructor(
    readonly code: LoomErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'LoomError';
  }

  static is(err: unknown, code?: LoomErrorCode): err is LoomError {
    return err instanceof LoomError && (code === undefined || err.code === code);
  }
}

/**
 * A stored record that could not be read as what it should be (a file of the embedded profile
 * damaged on disk): INTERNAL, its `details.damaged` naming it. A listing leaves such a record out
 * rather than fail for all the others.
 */
export function damagedData(what: string): LoomError {
  return new LoomError(LoomErrorCode.INTERNAL, `stored data is damaged: ${what}`, {
    damaged: what,
  });
}

export function isDamagedData(err: unknown): boolean {
  return LoomError.is(err, LoomErrorCode.INTERNAL) && typeof err.details?.damaged === 'string';
}
