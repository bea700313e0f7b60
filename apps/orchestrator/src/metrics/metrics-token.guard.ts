import { CanActivate, ExecutionContext, Inject, Injectable } from '@nestjs/common';
import { createHash, timingSafeEqual } from 'crypto';
import { LoomError, LoomErrorCode } from '@loom/session';
import { bearerToken } from '../auth/bearer-token';

/** LOOM_METRICS_TOKEN, or null (MetricsModule provides it). */
export const METRICS_TOKEN = Symbol('METRICS_TOKEN');

const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/**
 * GET /metrics behind LOOM_METRICS_TOKEN when it is set: `Authorization: Bearer <token>`, else
 * 401 UNAUTHENTICATED in API.md's shape. Unset, the route is open, like /health. Compared as
 * SHA-256 digests in constant time, so neither the length nor a prefix of the token leaks.
 */
@Injectable()
export class MetricsTokenGuard implements CanActivate {
  private readonly expected: Buffer | null;

  constructor(@Inject(METRICS_TOKEN) token: string | null) {
    this.expected = token ? digest(token) : null;
  }

  canActivate(context: ExecutionContext): boolean {
    if (!this.expected) return true;
    const req = context.switchToHttp().getRequest<{ headers: Record<string, unknown> }>();
    const token = bearerToken(req.headers.authorization);
    if (token === null) throw new LoomError(LoomErrorCode.UNAUTHENTICATED, 'missing bearer token');
    if (!timingSafeEqual(digest(token), this.expected))
      throw new LoomError(LoomErrorCode.UNAUTHENTICATED, 'invalid metrics token');
    return true;
  }
}
