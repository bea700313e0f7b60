import { NextFunction, Request, Response } from 'express';
import { AuthedRequest } from './jwt-auth.guard';
import { TokenVerifier } from './token-verifier';

/**
 * Express middleware, before the body parser: a request that carries a body is authenticated
 * first, so a client without a valid token cannot make the orchestrator read, decode and scan up
 * to 384 KB of JSON per request (the per-tenant rate limit counts only verified tenants). A
 * refused one gets its 401 at once, and its connection is closed rather than its body read.
 * Whatever its path: routes match case-insensitively (`/V1/…` is a `/v1` route), and the parser
 * reads the body of a path no route takes one on (`/health`, an unknown path) all the same; only
 * `/v1` routes take a body. Requests without a body are left to JwtAuthGuard, as before; either
 * way the guard finds the verified owner on the request.
 */
export function authenticateBeforeBody(tokens: TokenVerifier) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const hasBody =
      req.headers['transfer-encoding'] !== undefined ||
      Number(req.headers['content-length'] ?? 0) > 0;
    if (!hasBody) return next();
    tokens.owner(req.headers.authorization).then(
      (owner) => {
        (req as unknown as AuthedRequest).owner = owner;
        next();
      },
      (err: unknown) => {
        res.setHeader('Connection', 'close');
        next(err);
      },
    );
  };
}
