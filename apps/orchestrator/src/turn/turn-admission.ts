import { Inject, Injectable } from '@nestjs/common';
import { LOOM_ENV, LoomEnv, turnsPerTenant, turnsPerUser } from '@loom/agent-kit';
import { countDown } from '../security/counts';
import { LoomError, LoomErrorCode, Owner } from '@loom/session';
import { MetricsService } from '../metrics/metrics.service';

/** Seconds a turn refused for want of a slot is told to wait (Retry-After). */
export const TURN_RETRY_AFTER_S = 1;

/**
 * The bound on the turns one orchestrator holds at once (LOOM_MAX_TURNS_IN_FLIGHT): each holds
 * a connection, its request, a lock wait or agent calls and, streamed, its deltas. Past it a
 * turn is 503 UNAVAILABLE with Retry-After at once, before anything is stored, instead of
 * queueing without bound while agents are slower than turns arrive. A conversation's turns run
 * one at a time: past LOOM_MAX_TURNS_PER_CONVERSATION of them, one more is 409 CONFLICT at once
 * (as after the lock wait), so one flooded conversation does not take every other's slots. A
 * tenant holds at most LOOM_MAX_TURNS_PER_TENANT of them (by default half): past it, its turn is
 * 503 as past the bound, so one tenant (slow turns, or many at once within its rate limit) does
 * not refuse every other tenant's turns. Within that, a user holds at most LOOM_MAX_TURNS_PER_USER
 * (by default half the tenant's), so one user does not refuse every other user of its tenant.
 */
@Injectable()
export class TurnAdmission {
  private inFlight = 0;
  /** Turns held per tenant: an entry per tenant with a turn held. */
  private readonly perTenant = new Map<string, number>();
  /** Turns held per user of a tenant: an entry per user with a turn held. */
  private readonly perUser = new Map<string, number>();
  /**
   * Turns held per conversation and owner: an entry per conversation with a turn held. Counted
   * before the owner check, so by the caller's own tenant and user: another user's requests to
   * the id (each a 404 in the end) neither take the owner's slots nor learn, from a 409, that the
   * conversation exists and is busy.
   */
  private readonly perConversation = new Map<string, number>();

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly metrics: MetricsService,
  ) {}

  /** Takes a slot, or throws 409 or 503; the function returned gives it back (once). */
  admit(owner: Owner, conversationId: string): () => void {
    const key = `${owner.tenantId} ${owner.userId} ${conversationId}`;
    const ofConversation = this.perConversation.get(key) ?? 0;
    if (ofConversation >= this.env.LOOM_MAX_TURNS_PER_CONVERSATION)
      throw new LoomError(LoomErrorCode.CONFLICT, 'the conversation is busy with other turns', {
        retryAfterS: TURN_RETRY_AFTER_S,
      });
    if (this.inFlight >= this.env.LOOM_MAX_TURNS_IN_FLIGHT)
      throw new LoomError(
        LoomErrorCode.UNAVAILABLE,
        `this orchestrator is running ${this.env.LOOM_MAX_TURNS_IN_FLIGHT} turns, its limit: retry later`,
        { retryAfterS: TURN_RETRY_AFTER_S },
      );
    const tenantShare = turnsPerTenant(this.env);
    const ofTenant = this.perTenant.get(owner.tenantId) ?? 0;
    if (ofTenant >= tenantShare)
      throw new LoomError(
        LoomErrorCode.UNAVAILABLE,
        `this orchestrator is running ${tenantShare} turns of your tenant, its limit: retry later`,
        { retryAfterS: TURN_RETRY_AFTER_S },
      );
    const user = `${owner.tenantId} ${owner.userId}`;
    const userShare = turnsPerUser(this.env);
    const ofUser = this.perUser.get(user) ?? 0;
    if (ofUser >= userShare)
      throw new LoomError(
        LoomErrorCode.UNAVAILABLE,
        `this orchestrator is running ${userShare} turns of yours, its limit: retry later`,
        { retryAfterS: TURN_RETRY_AFTER_S },
      );
    this.perConversation.set(key, ofConversation + 1);
    this.perTenant.set(owner.tenantId, ofTenant + 1);
    this.perUser.set(user, ofUser + 1);
    this.metrics.turnsInFlight(++this.inFlight);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      countDown(this.perConversation, key);
      countDown(this.perTenant, owner.tenantId);
      countDown(this.perUser, user);
      this.metrics.turnsInFlight(--this.inFlight);
    };
  }
}
