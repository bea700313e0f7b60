import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { JwtService } from '@nestjs/jwt';
import { ClsService } from 'nestjs-cls';
import { LoomError, LoomErrorCode, Owner, PRINCIPAL_PATTERN } from '@loom/session';
import { LoomClsStore } from '@loom/observability';

export interface AuthedRequest {
  headers: Record<string, string | string[] | undefined>;
  owner?: Owner;
}

/** HS256 bearer tokens with `sub` (user) and `tid` (tenant); the tenant never comes from elsewhere. */
@Injectable()
export class JwtAuthGuard implements CanActivate {
  constructor(
    private readonly jwt: JwtService,
    private readonly cls: ClsService<LoomClsStore>,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const req = context.switchToHttp().getRequest<AuthedRequest>();
    const header = req.headers.authorization;
    const token =
      typeof header === 'string' && /^bearer /i.test(header) ? header.slice(7).trim() : null;
    if (!token) throw unauthenticated('missing bearer token');
    let claims: { sub?: unknown; tid?: unknown };
    try {
      claims = await this.jwt.verifyAsync(token, { algorithms: ['HS256'] });
    } catch {
      throw unauthenticated('invalid or expired token');
    }
    if (
      typeof claims.sub !== 'string' ||
      typeof claims.tid !== 'string' ||
      !PRINCIPAL_PATTERN.test(claims.sub) ||
      !PRINCIPAL_PATTERN.test(claims.tid)
    ) {
      throw unauthenticated('token lacks valid sub and tid claims');
    }
    req.owner = { tenantId: claims.tid, userId: claims.sub };
    this.cls.set('tenantId', claims.tid);
    this.cls.set('userId', claims.sub);
    return true;
  }
}

function unauthenticated(message: string): LoomError {
  return new LoomError(LoomErrorCode.UNAUTHENTICATED, message);
}
