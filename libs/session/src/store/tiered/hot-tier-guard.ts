import {
  BrokenCircuitError,
  CircuitBreakerPolicy,
  CircuitState,
  ConsecutiveBreaker,
  TaskCancelledError,
  TimeoutStrategy,
  circuitBreaker,
  handleAll,
  timeout,
  wrap,
} from 'cockatiel';

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
 * Returns undefined instead of throwing when the hot tier is unavailable.
 */
export class HotTierGuard {
  readonly breaker: CircuitBreakerPolicy;
  private readonly policy;

  constructor(opts: HotTierGuardOptions = DEFAULT_GUARD) {
    this.breaker = circuitBreaker(handleAll, {
      halfOpenAfter: opts.halfOpenAfterMs,
      breaker: new ConsecutiveBreaker(opts.failureThreshold),
    });
    this.policy = wrap(this.breaker, timeout(opts.callTimeoutMs, TimeoutStrategy.Aggressive));
  }

  get isOpen(): boolean {
    return this.breaker.state === CircuitState.Open;
  }

  /** Runs `fn` against the hot tier; `undefined` when it failed, timed out or the breaker is open. */
  async attempt<T>(
    fn: () => Promise<T>,
  ): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
    try {
      return { ok: true, value: await this.policy.execute(fn) };
    } catch (error) {
      if (error instanceof BrokenCircuitError || error instanceof TaskCancelledError)
        return { ok: false, error };
      return { ok: false, error };
    }
  }
}
