import { Inject, Injectable } from '@nestjs/common';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { LoomError, LoomErrorCode } from '@loom/session';
import { MetricsService } from '../metrics/metrics.service';

/** Seconds a turn refused for want of a slot is told to wait (Retry-After). */
export const TURN_RETRY_AFTER_S = 1;

/**
 * The bound on the turns one orchestrator holds at once (LOOM_MAX_TURNS_IN_FLIGHT): each holds
 * a connection, its request, a lock wait or agent calls and, streamed, its deltas. Past it a
 * turn is 503 UNAVAILABLE with Retry-After at once, before anything is stored, instead of
 * queueing without bound while agents are slower than turns arrive.
 */
@Injectable()
export class TurnAdmission {
  private inFlight = 0;

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly metrics: MetricsService,
  ) {}

  /** Takes a slot, or throws 503 UNAVAILABLE; the function returned gives it back (once). */
  admit(): () => void {
    if (this.inFlight >= this.env.LOOM_MAX_TURNS_IN_FLIGHT)
      throw new LoomError(
        LoomErrorCode.UNAVAILABLE,
        `this orchestrator is running ${this.env.LOOM_MAX_TURNS_IN_FLIGHT} turns, its limit: retry later`,
        { retryAfterS: TURN_RETRY_AFTER_S },
      );
    this.metrics.turnsInFlight(++this.inFlight);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.metrics.turnsInFlight(--this.inFlight);
    };
  }
}
