import {
  CallHandler,
  ExecutionContext,
  Inject,
  Injectable,
  Logger,
  NestInterceptor,
  PipeTransform,
} from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { ClsService } from 'nestjs-cls';
import { Observable } from 'rxjs';
import { LoomError, LoomErrorCode } from '@loom/session';
import { AssignmentSigner } from '@loom/security';
import { LoomClsStore, pickMdc } from '@loom/observability';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { AGENT_DESCRIPTOR, agentService } from './agent-handler';
import { INSTANCE_ID } from './agent-runner';

/**
 * Opens the CLS context of every execute message before anything else runs (payload pipes
 * included): correlationId from `meta` (when well-formed), agentType and agentId. Tenant,
 * conversation and task are added by AssignmentPipe, from a verified assignment only. Typed
 * failures are logged with their code (assignment rejections by the pipe itself).
 */
@Injectable()
export class AgentContextInterceptor implements NestInterceptor {
  private readonly log = new Logger('AgentExecute');

  constructor(
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
        this.cls.set('service', agentService(this.descriptor.agentType));
        this.cls.set('agentType', this.descriptor.agentType);
        this.cls.set('agentId', this.instanceId);
        next.handle().subscribe({
          next: (v) => subscriber.next(v),
          complete: () => subscriber.complete(),
          error: (err: unknown) => {
            const body = err instanceof RpcException ? err.getError() : null;
            const { code, message } = (body && typeof body === 'object' ? body : {}) as {
              code?: unknown;
              message?: unknown;
            };
            if (typeof code === 'string' && code !== LoomErrorCode.ASSIGNMENT_REJECTED)
              this.log.warn({ msg: 'execution rejected', code, reason: message });
            subscriber.error(err);
          },
        });
      }),
    );
  }
}

/**
 * The agent-side guard, run right after the payload's shape is validated (VALIDATION_FAILED
 * for a malformed one) and before the runner reads anything: unsigned, altered, expired or
 * foreign assignments end here with ASSIGNMENT_REJECTED, logged. A verified assignment puts
 * tenantId, conversationId and taskId into the CLS context.
 */
@Injectable()
export class AssignmentPipe implements PipeTransform {
  private readonly log = new Logger('AssignmentGuard');

  constructor(
    private readonly signer: AssignmentSigner,
    private readonly cls: ClsService<LoomClsStore>,
    @Inject(AGENT_DESCRIPTOR) private readonly descriptor: AgentRegistration,
  ) {}

  transform(value: unknown): unknown {
    const raw = value && typeof value === 'object' ? (value as Record<string, unknown>) : {};
    let claims;
    try {
      claims = this.signer.verify(raw.assignment, this.descriptor.agentType);
    } catch (err) {
      const reason = LoomError.is(err) ? err.message : 'invalid assignment';
      this.log.warn({
        msg: 'assignment rejected',
        code: LoomErrorCode.ASSIGNMENT_REJECTED,
        reason,
      });
      throw new RpcException({ code: LoomErrorCode.ASSIGNMENT_REJECTED, message: reason });
    }
    if (this.cls.isActive()) {
      const known = pickMdc(claims);
      for (const f of ['tenantId', 'conversationId', 'taskId'] as const)
        if (known[f]) this.cls.set(f, known[f]);
    }
    return value;
  }
}
