import { Inject, Injectable } from '@nestjs/common';
import { JwtService } from '@nestjs/jwt';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { LoomError, LoomErrorCode, Owner, PRINCIPAL_PATTERN } from '@loom/session';
import { bearerToken } from './bearer-token';

/** Seconds an issuer's clock may run ahead of ours (`nbf`, LOOM_JWT_MAX_AGE_S). */
const CLOCK_LEEWAY_S = 30;

/**
 * HS256 bearer tokens with `sub` (user) and `tid` (tenant); the tenant never comes from elsewhere.
 * `exp` is honoured; with LOOM_JWT_MAX_AGE_S set, a token must have one, no further ahead than that.
 * `nbf` is honoured with CLOCK_LEEWAY_S: an issuer whose clock runs a little ahead of ours stamps
 * a new token "not before" a moment still to come here, and its user must not get 401s meanwhile.
 */
@Injectable()
export class TokenVerifier {
  constructor(
    private readonly jwt: JwtService,
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
  ) {}

  /** The owner an `Authorization` header's token names; UNAUTHENTICATED when it names none. */
  async owner(header: string | string[] | undefined): Promise<Owner> {
    // More than one (keepEveryAuthorization): which of them is meant is not for this server to guess.
    if (Array.isArray(header)) throw unauthenticated('more than one Authorization header');
    const token = bearerToken(header);
    if (!token) throw unauthenticated('missing bearer token');
    let verified: {
      header: object;
      payload: { sub?: unknown; tid?: unknown; exp?: unknown; nbf?: unknown };
    };
    try {
      // `nbf` is checked below, with the leeway jsonwebtoken would not give it without giving
      // `exp` the same (a token honoured after it expired).
      verified = await this.jwt.verifyAsync(token, {
        algorithms: ['HS256'],
        complete: true,
        ignoreNotBefore: true,
      });
    } catch {
      throw unauthenticated('invalid or expired token');
    }
    // RFC 7515 §4.1.11: a critical extension this server does not implement voids the token.
    if ('crit' in verified.header)
      throw unauthenticated('the token names critical extensions this server does not support');
    const claims = typeof verified.payload === 'object' && verified.payload ? verified.payload : {};
    if (
      claims.nbf !== undefined &&
      (typeof claims.nbf !== 'number' || claims.nbf > Date.now() / 1000 + CLOCK_LEEWAY_S)
    )
      throw unauthenticated('invalid or expired token');
    if (
      typeof claims.sub !== 'string' ||
      typeof claims.tid !== 'string' ||
      !PRINCIPAL_PATTERN.test(claims.sub) ||
      !PRINCIPAL_PATTERN.test(claims.tid)
    ) {
      throw unauthenticated('token lacks valid sub and tid claims');
    }
    // Loom's own sessions (the run index, the agent catalog) belong to tenants named `_…`.
    if (claims.tid.startsWith('_'))
      throw unauthenticated('tenant ids starting with _ are reserved');
    const maxAge = this.env.LOOM_JWT_MAX_AGE_S;
    if (maxAge > 0) {
      const exp = claims.exp;
      // An issuer's clock a little ahead of ours must not turn a full-length token away.
      if (typeof exp !== 'number' || exp > Date.now() / 1000 + maxAge + CLOCK_LEEWAY_S)
        throw unauthenticated(`the token must expire within ${maxAge} s`);
    }
    return { tenantId: claims.tid, userId: claims.sub };
  }
}

function unauthenticated(message: string): LoomError {
  return new LoomError(LoomErrorCode.UNAUTHENTICATED, message);
}
