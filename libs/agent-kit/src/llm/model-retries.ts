import { APIConnectionError } from 'openai';
import { LlmError } from './llm.types';

const FIRST_PAUSE_MS = 500;
const MAX_PAUSE_MS = 8_000;
/** The longest `retry-after` taken as asked; a longer one ends the call with the provider's answer. */
const MAX_RETRY_AFTER_MS = 60_000;

/**
 * Runs `attempt` up to `retries` more times after a retryable failure (a connection error, 408,
 * 409, 429, 5xx), pausing as the provider asks (`retry-after-ms`, `retry-after`) or
 * exponentially with jitter. Loom retries rather than the SDK, whose pauses cannot see a
 * deadline: a pause that would leave the next attempt less than `attemptMs` (its time-out)
 * before `deadlineAt` is not taken, and the provider's own answer (a 429, say) is what the
 * caller gets, not a time-out of an attempt that had no time. A pause ends early when `signal`
 * aborts.
 */
export async function withRetries<T>(
  attempt: () => Promise<T>,
  retries: number,
  signal: AbortSignal,
  deadlineAt: number,
  attemptMs: number,
): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (error) {
      if (n >= retries || signal.aborted || !retryable(error)) throw error;
      const pause = pauseAfter(error, n);
      if (pause === null || Date.now() + pause + attemptMs > deadlineAt) throw error;
      await sleep(pause, signal);
    }
  }
}

/** Failures of an attempt whose answer had started that are worth asking again (see askAgain). */
const again = new WeakSet<LlmError>();

/**
 * Marks a failure of an answer that had started as one to ask again, as a 429 or 503 before it
 * would be: the provider said in its stream it is busy before the answer had any text.
 */
export function askAgain(error: LlmError): LlmError {
  again.add(error);
  return error;
}

function retryable(error: unknown): boolean {
  if (error instanceof LlmError) return again.has(error);
  const status = (error as { status?: unknown } | null)?.status;
  if (typeof status === 'number')
    return status === 408 || status === 409 || status === 429 || status >= 500;
  return error instanceof APIConnectionError; // a time-out is one too
}

/**
 * The pause the provider asked for (`retry-after-ms`, `retry-after`) in whole seconds, at least
 * 1 and at most an hour; undefined when it asked for none. What a client of Loom's should wait
 * when this failure is the call's answer.
 */
export function retryAfterSeconds(error: unknown): number | undefined {
  const headers = (error as { headers?: { get?(name: string): string | null } } | null)?.headers;
  const asked = retryAfterMs(headers?.get?.('retry-after-ms'), headers?.get?.('retry-after'));
  return asked === undefined ? undefined : Math.min(Math.max(1, Math.ceil(asked / 1000)), 3600);
}

/** ms to wait before attempt n + 2; null when the provider asks for longer than Loom waits. */
function pauseAfter(error: unknown, n: number): number | null {
  const headers = (error as { headers?: { get?(name: string): string | null } } | null)?.headers;
  const asked = retryAfterMs(headers?.get?.('retry-after-ms'), headers?.get?.('retry-after'));
  if (asked !== undefined) return asked <= MAX_RETRY_AFTER_MS ? asked : null;
  const full = Math.min(FIRST_PAUSE_MS * 2 ** n, MAX_PAUSE_MS);
  return full * (0.75 + Math.random() * 0.25);
}

function retryAfterMs(ms?: string | null, after?: string | null): number | undefined {
  const exact = Number(ms);
  if (ms && Number.isFinite(exact) && exact >= 0) return exact;
  if (!after) return undefined;
  const seconds = Number(after);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const at = Date.parse(after);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
