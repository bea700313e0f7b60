import {
  CallHandler,
  ExecutionContext,
  Inject,
  Injectable,
  Logger,
  NestInterceptor,
} from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { ClsService } from 'nestjs-cls';
import { Observable } from 'rxjs';
import { LoomError, LoomErrorCode } from '@loom/session';
import { AssignmentSigner } from '@loom/security';
import { LoomClsStore, pickMdc } from '@loom/observability';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { AGENT_DESCRIPTOR } from './agent-handler';
import { INSTANCE_ID } from './agent-runner';

/**
 * The agent-side guard of every execute message, run before payload validation and the handler:
 * opens the CLS context (correlationId from `meta`, agentType and agentId; tenant, conversation
 * and task only from a verified assignment), then verifies the signed assignment. Unsigned,
 * altered, expired or foreign assignments end here with ASSIGNMENT_REJECTED, logged, before
 * anything is read. Typed failures after that are logged with their code.
 */
@Injectable()
export class AssignmentInterceptor implements NestInterceptor {
  private readonly log = new Logger('AssignmentGuard');

  constructor(
    private readonly signer: AssignmentSigner,
    private readonly cls: ClsService<LoomClsStore>,
    @Inject(AGENT_DESCRIPTOR) private readonly descriptor: AgentRegistration,
    @Inject(INSTANCE_ID) private readonly instanceId: string,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const payload = context.switchToRpc().getData<unknown>();
    const raw = payload && typeof payload === 'object' ? (payload as Record<string, unknown>) : {};
    return new Observable((subscriber) =>
      this.cls.run(() => {
        const meta = pickMdc(raw.meta);
        if (meta.correlationId) this.cls.set('correlationId', meta.correlationId);
        this.cls.set('agentType', this.descriptor.agentType);
        this.cls.set('agentId', this.instanceId);
        try {
          const claims = this.signer.verify(raw.assignment, this.descriptor.agentType);
          // Signed, but still shaped before it reaches a log line (the payload pipe checks ids next).
          const known = pickMdc(claims);
          for (const f of ['tenantId', 'conversationId', 'taskId'] as const)
            if (known[f]) this.cls.set(f, known[f]);
        } catch (err) {
          const reason = LoomError.is(err) ? err.message : 'invalid assignment';
          this.log.warn({
            msg: 'assignment rejected',
            code: LoomErrorCode.ASSIGNMENT_REJECTED,
            reason,
          });
          subscriber.error(
            new RpcException({ code: LoomErrorCode.ASSIGNMENT_REJECTED, message: reason }),
          );
          return;
        }
        next.handle().subscribe({
          next: (v) => subscriber.next(v),
          complete: () => subscriber.complete(),
          error: (err: unknown) => {
            const body = err instanceof RpcException ? err.getError() : null;
            const code =
              body && typeof body === 'object' ? (body as { code?: unknown }).code : null;
            if (typeof code === 'string')
              this.log.warn({
                msg: 'execution rejected',
                code,
                reason: (body as { message?: unknown }).message,
              });
            subscriber.error(err);
          },
        });
      }),
    );
  }
}
