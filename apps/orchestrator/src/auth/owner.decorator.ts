import { createParamDecorator, ExecutionContext } from '@nestjs/common';
import { Owner } from '@loom/session';
import { AuthedRequest } from './jwt-auth.guard';

/** The verified tenant and user of the request (set by JwtAuthGuard). */
export const CurrentOwner = createParamDecorator(
  (_: unknown, ctx: ExecutionContext): Owner =>
    ctx.switchToHttp().getRequest<AuthedRequest>().owner!,
);
