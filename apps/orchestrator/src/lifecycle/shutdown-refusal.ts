import { LoomError, LoomErrorCode } from '@loom/session';

/**
 * The 503 UNAVAILABLE of a turn this orchestrator gives up because it is stopping (handed over
 * at SIGTERM, or a retry that came in during the hand-over): expected while a replica stops, and
 * the client's retry with the same Idempotency-Key finishes the turn. Logged as a warning, not
 * an error: a deploy must not page anyone (docs/recovery.md, "Stopping a process").
 */
export function shutdownRefusal(message: string): LoomError {
  return new LoomError(LoomErrorCode.UNAVAILABLE, message, { shuttingDown: true });
}

export function isShutdownRefusal(err: unknown): boolean {
  return LoomError.is(err, LoomErrorCode.UNAVAILABLE) && err.details?.shuttingDown === true;
}
