import {
  CircuitBreakerPolicy,
  CircuitState,
  ConsecutiveBreaker,
  circuitBreaker,
  handleAll,
} from 'cockatiel';
import { LoomError, LoomErrorCode } from '../../errors/session-error';

export interface HotTierGuardOptions {
  /** No hot-tier call waits longer than this (ms). */
  callTimeoutMs: number;
  /** Consecutive failures that open the breaker. */
  failureThreshold: number;
  /** How long the breaker stays open before one trial call (ms). */
  halfOpenAfterMs: number;
}

export const DEFAULT_GUARD: HotTierGuardOptions = {
  callTimeoutMs: 250,
  failureThreshold: 3,
  halfOpenAfterMs: 2000,
};

/**
 * Wraps every Redis call of the tiered store: a time-out bounds each call and a circuit breaker
 * (cockatiel) sends calls straight to MySQL while Redis is failing, so nobody waits out time-outs.
 *
 * The time-out is a plain timer race rather than cockatiel's TimeoutPolicy: that policy makes an
 * AbortController per call and aborts it when the call ends, and the DOMException each abort
 * builds cost more CPU than the Redis call it guarded (measured with --cpu-prof on a turn). A
 * timed-out Redis command is not cancellable anyway; ioredis settles it later and it is ignored.
 */
export class HotTierGuard {
  readonly breaker: CircuitBreakerPolicy;

  constructor(private readonly opts: HotTierGuardOptions = DEFAULT_GUARD) {
    this.breaker = circuitBreaker(handleAll, {
      halfOpenAfter: opts.halfOpenAfterMs,
      breaker: new ConsecutiveBreaker(opts.failureThreshold),
    });
  }

  get isOpen(): boolean {
    return this.breaker.state === CircuitState.Open;
  }

  /** Runs `fn` against the hot tier; not ok when it failed, timed out or the breaker is open. */
  async attempt<T>(
    fn: () => Promise<T>,
  ): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
    try {
      return { ok: true, value: await this.breaker.execute(() => this.bounded(fn)) };
    } catch (error) {
      return { ok: false, error };
    }
  }

  private bounded<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new LoomError(
              LoomErrorCode.UNAVAILABLE,
              `hot tier call timed out after ${this.opts.callTimeoutMs} ms`,
            ),
          ),
        this.opts.callTimeoutMs,
      );
      fn().then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }
}
