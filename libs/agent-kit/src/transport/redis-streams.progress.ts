/** Progress is reported at most this often per execution, however short the time-out (ms). */
export const MIN_PROGRESS_INTERVAL_MS = 50;
/** …and at least this often, so a long silence bound still costs one message every 10 s. */
export const MAX_PROGRESS_INTERVAL_MS = 10_000;

/**
 * How often a running handler tells its caller it is alive, for a caller that gives up after
 * `silenceMs` without a sign of life: a quarter of it, so three reports in a row may be lost
 * or late before the caller stops waiting.
 */
export function progressInterval(silenceMs: number): number {
  return Math.min(
    MAX_PROGRESS_INTERVAL_MS,
    Math.max(MIN_PROGRESS_INTERVAL_MS, Math.floor(silenceMs / 4)),
  );
}

/**
 * When the first report of a handler started at `now` is due: after one interval (a handler
 * that ends sooner sends none), or at once when the caller, which has heard nothing since it
 * sent the request, would stop waiting within one interval (`startBy`).
 */
export function firstProgressDelay(now: number, startBy: number, intervalMs: number): number {
  return Math.max(0, Math.min(intervalMs, startBy - now - intervalMs));
}

/**
 * The reports of one running handler: `send` every `intervalMs` from `firstDelayMs` on, until
 * stop(). A report still unanswered (Redis slow or away) is not followed by another.
 */
export class ProgressBeat {
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private sending = false;

  constructor(
    private readonly intervalMs: number,
    firstDelayMs: number,
    private readonly send: () => Promise<unknown>,
  ) {
    this.schedule(firstDelayMs);
  }

  /** No report after this one; idempotent. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** A send that throws at once (no connection any more) must not throw from a timer. */
  private sendSafely(): Promise<unknown> {
    try {
      return this.send();
    } catch (err) {
      return Promise.reject(err);
    }
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      if (this.stopped) return;
      if (!this.sending) {
        this.sending = true;
        void this.sendSafely()
          .catch(() => undefined)
          .finally(() => (this.sending = false));
      }
      this.schedule(this.intervalMs);
    }, ms);
    this.timer.unref();
  }
}
