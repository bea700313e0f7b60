import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import { NextFunction, Request, RequestHandler, Response } from 'express';
import { LoomError, LoomErrorCode } from '@loom/session';
import { AuthedRequest } from '../auth/jwt-auth.guard';
import { TokenVerifier } from '../auth/token-verifier';
import type { TenantThrottlerGuard } from './tenant-throttler.guard';

/** Matches `/v1` paths as the router does (case-insensitively). */
const V1_PATH = /^\/v1(\/|$)/i;

/** Requests counted before routing, each with its 429 when it was past the limit. */
const counted = new WeakMap<object, LoomError | null>();

/** Whether the request was counted before routing (the routes' guard then counts it no more). */
export function countedBeforeRouting(req: object): boolean {
  return counted.has(req);
}

/** The 429 of a request counted past its tenant's limit before routing, else undefined. */
export function rateLimitRefusal(req: object): LoomError | undefined {
  return counted.get(req) ?? undefined;
}

/** What the throttler's context names as the class and handler of a request counted here. */
class BeforeRouting {
  request(): void {}
}

/**
 * Express middleware, before the body parser: counts, against the tenant's rate limit, every
 * request with a valid token to a `/v1` path or carrying a body (read either way), whether or
 * not a route then takes it. The guard on the routes alone never saw a request that no route
 * matches (a 404) or whose body the parser refuses (a 400): a client with a valid token could
 * send those without end and never get a 429. A request past the limit is not answered here
 * but marked: its body is not read (`unlessRateLimited`), and whatever answers it (the routes'
 * guard, the error filter for a 404) answers its 429, in the request's context (correlation id,
 * access log). One without a valid token is left to its 401 (or 404), uncounted.
 */
export function countBeforeRouting(tokens: TokenVerifier, throttler: TenantThrottlerGuard) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const authed = req as unknown as AuthedRequest;
    if (!authed.owner && !V1_PATH.test(req.path)) return next();
    const count = async () => {
      authed.owner ??= await tokens.owner(req.headers.authorization).catch(() => undefined);
      if (!authed.owner) return;
      const proto = BeforeRouting.prototype;
      try {
        await throttler.canActivate(
          new ExecutionContextHost([req, res, next], BeforeRouting, proto.request),
        );
        counted.set(req, null);
      } catch (err) {
        if (!LoomError.is(err) || err.code !== LoomErrorCode.RATE_LIMITED) throw err;
        counted.set(req, err);
      }
    };
    count().then(() => next(), next);
  };
}

/** `handler`, except for a request already refused by the rate limit: its body is not read. */
export function unlessRateLimited(handler: RequestHandler): RequestHandler {
  return (req, res, next) => (counted.get(req) ? next() : handler(req, res, next));
}
