import { redactPii } from './redact';

/**
 * Why something failed, for a line written outside the logger (a process that could not start,
 * an operator command's error, on stderr): the error's message, with PII and secrets redacted as
 * the logger redacts its lines. A start error may quote a URL with its password, or a token.
 */
export function redactedReason(err: unknown): string {
  return redactPii(err instanceof Error ? err.message : String(err));
}
