import { LoomError, LoomErrorCode } from '@loom/session';
import { toErrorBody } from '../errors/http-error.filter';

/** Distinct agent types a label shows by name; the ones seen after them are `other`. */
export const MAX_AGENT_TYPE_LABELS = 50;
export const OTHER = 'other';

/** How a task the resumer took up (after a crash, a hand-over or a lost lease) ended. */
export type RecoveryOutcome = 'completed' | 'failed' | 'tidied' | 'gone' | 'error';

/** Seconds, for turns and agent calls alike: a stored result (ms) to AGENT_MAX_EXECUTION_MS (15 min). */
export const DURATION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900];

const CODES = new Set<string>(Object.values(LoomErrorCode));

/**
 * Keeps a label's values bounded: the first `max` distinct values keep their name, any later
 * one is `other`. Agent types are validated names, planned from the registry; this is the
 * backstop against a deployment that churns through many, each a series for good.
 */
export class LabelFolder {
  private readonly kept = new Set<string>();

  constructor(private readonly max = MAX_AGENT_TYPE_LABELS) {}

  /** The label value `value` is counted under. */
  label(value: string): string {
    if (this.kept.has(value)) return value;
    if (this.kept.size >= this.max) return OTHER;
    this.kept.add(value);
    return value;
  }
}

/**
 * The code a turn that threw answered with, as the client saw it (LOCK_TIMEOUT is CONFLICT);
 * a code outside API.md's list (none should reach here) is INTERNAL.
 */
export function turnOutcome(err: unknown): string {
  const { code } = toErrorBody(err);
  return CODES.has(code) ? code : LoomErrorCode.INTERNAL;
}

/** The code an agent call failed with (the dispatcher throws LoomErrors only). */
export function agentCallOutcome(err: unknown): string {
  return LoomError.is(err) && CODES.has(err.code) ? err.code : LoomErrorCode.AGENT_FAILED;
}
