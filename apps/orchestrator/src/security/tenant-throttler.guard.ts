import { ExecutionContext, Injectable } from '@nestjs/common';
import { ThrottlerGuard, ThrottlerLimitDetail } from '@nestjs/throttler';
import { Response } from 'express';
import { LoomError, LoomErrorCode } from '@loom/session';
import { AuthedRequest } from '../auth/jwt-auth.guard';
import { countedBeforeRouting, rateLimitRefusal } from './count-before-routing';

/**
 * Per-tenant rate limit (@nestjs/throttler): runs after JwtAuthGuard, so the counter is the
 * verified tenant of the token (never a header), one counter per tenant across every route.
 * Every answer carries X-RateLimit-Limit, -Remaining and -Reset (seconds); past the limit,
 * 429 RATE_LIMITED carries them too (Remaining 0), with Retry-After (seconds).
 */
@Injectable()
export class TenantThrottlerGuard extends ThrottlerGuard {
  /** A request counted before routing (countBeforeRouting) is not counted again: its 429, if any. */
  override async canActivate(context: ExecutionContext): Promise<boolean> {
    const req = context.switchToHttp().getRequest<object>();
    if (!countedBeforeRouting(req)) return super.canActivate(context);
    const refusal = rateLimitRefusal(req);
    if (refusal) throw refusal;
    return true;
  }

  protected override async getTracker(req: Record<string, unknown>): Promise<string> {
    const owner = (req as unknown as AuthedRequest).owner;
    return owner ? `tenant:${owner.tenantId}` : `ip:${String(req.ip ?? 'unknown')}`;
  }

  protected override generateKey(_: ExecutionContext, tracker: string, name: string): string {
    return `${name}:${tracker}`;
  }

  protected override async throwThrottlingException(
    context: ExecutionContext,
    detail: ThrottlerLimitDetail,
  ): Promise<void> {
    const res = context.switchToHttp().getResponse<Response>();
    res.header(`${this.headerPrefix}-Limit`, String(detail.limit));
    res.header(`${this.headerPrefix}-Remaining`, '0');
    res.header(`${this.headerPrefix}-Reset`, String(detail.timeToBlockExpire));
    throw new LoomError(
      LoomErrorCode.RATE_LIMITED,
      `rate limit of ${detail.limit} requests exceeded; retry after ${detail.timeToBlockExpire} s`,
    );
  }
}
