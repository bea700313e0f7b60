import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { Owner } from '@loom/session';
import { LoomClsStore } from '@loom/observability';
import { TokenVerifier } from './token-verifier';

export interface AuthedRequest {
  headers: Record<string, string | string[] | undefined>;
  /** The verified owner: set by this guard, or before the body was read (authenticateBeforeBody). */
  owner?: Owner;
}

/** The request's verified owner (TokenVerifier) into the request and CLS, else 401. */
@Injectable()
export class JwtAuthGuard implements CanActivate {
  constructor(
    private readonly tokens: TokenVerifier,
    private readonly cls: ClsService<LoomClsStore>,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const req = context.switchToHttp().getRequest<AuthedRequest>();
    const owner = (req.owner ??= await this.tokens.owner(req.headers.authorization));
    this.cls.set('tenantId', owner.tenantId);
    this.cls.set('userId', owner.userId);
    return true;
  }
}
