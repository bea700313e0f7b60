import { Inject, Injectable } from '@nestjs/common';
import { LOOM_ENV, LoomEnv, messagesReadPerTenant, messagesReadPerUser } from '@loom/agent-kit';
import { LoomError, LoomErrorCode, Owner } from '@loom/session';
import { countDown } from '../security/counts';

/** Seconds a page refused for want of room is told to wait (Retry-After). */
export const READ_RETRY_AFTER_S = 1;

/**
 * The bound on the message pages one orchestrator builds or is sending at once
 * (LOOM_MAX_MESSAGES_READ_IN_FLIGHT, in messages: each page counts its `limit`, from before it is
 * read until its response closes). A page of 200 replies of up to 100,000 characters is
 * tens of MB; past the bound a page is 503 UNAVAILABLE with Retry-After at once, before anything is
 * read, instead of a flood of them exhausting the process's memory. It bounds characters too, as
 * no message is stored longer than an answer (MAX_ANSWER_CHARS; user content is 32,000, an
 * imported legacy message MAX_LEGACY_MESSAGE_CHARS, both checked by this file's spec). One
 * tenant's pages hold at most LOOM_MAX_MESSAGES_READ_PER_TENANT (by default half, and at least
 * a page): a few large pages of one tenant do not refuse every other tenant's reads. Within that,
 * one user's hold at most LOOM_MAX_MESSAGES_READ_PER_USER (by default half the tenant's, at least
 * a page), so one user does not refuse every other user of its tenant.
 */
@Injectable()
export class MessageReadAdmission {
  private inFlight = 0;
  /** Messages held per tenant: an entry per tenant with a page being read. */
  private readonly perTenant = new Map<string, number>();
  /** Messages held per user of a tenant: an entry per user with a page being read. */
  private readonly perUser = new Map<string, number>();

  constructor(@Inject(LOOM_ENV) private readonly env: LoomEnv) {}

  /**
   * Takes room for a page of `limit` messages of `owner`, or throws 503; the function returned
   * gives it back (once).
   */
  admit(limit: number, owner: Owner): () => void {
    const user = `${owner.tenantId} ${owner.userId}`;
    const ofTenant = this.perTenant.get(owner.tenantId) ?? 0;
    const ofUser = this.perUser.get(user) ?? 0;
    if (
      this.inFlight + limit > this.env.LOOM_MAX_MESSAGES_READ_IN_FLIGHT ||
      ofTenant + limit > messagesReadPerTenant(this.env) ||
      ofUser + limit > messagesReadPerUser(this.env)
    )
      throw new LoomError(
        LoomErrorCode.UNAVAILABLE,
        'this orchestrator is reading as many messages as it may at once: retry later',
        { retryAfterS: READ_RETRY_AFTER_S },
      );
    this.inFlight += limit;
    this.perTenant.set(owner.tenantId, ofTenant + limit);
    this.perUser.set(user, ofUser + limit);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight -= limit;
      countDown(this.perTenant, owner.tenantId, limit);
      countDown(this.perUser, user, limit);
    };
  }
}
