import { Controller, PipeTransform, Type, UseInterceptors, ValidationPipe } from '@nestjs/common';
import { BaseRpcContext, Ctx, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { MAX_JSON_DEPTH, MAX_JSON_VALUES } from '@loom/security';
import {
  agentExecutePattern,
  agentHealthPattern,
  ExecuteAgentRequest,
  ExecuteAgentResult,
} from '../contracts/agent-messages';
import { RedisStreamsContext } from '../transport/redis-streams.context';
import { AgentRunner } from './agent-runner';
import { AgentContextInterceptor, AssignmentPipe } from './assignment.interceptor';

const PROPERTY = /^[A-Za-z0-9_]{1,64}$/;

/**
 * Payloads are validated; a bad one is a typed VALIDATION_FAILED, never a crash. The message
 * names the offending properties only when they are plain identifiers (nothing sent is echoed).
 */
export const rpcValidationPipe = new ValidationPipe({
  whitelist: true,
  transform: true,
  exceptionFactory: (errors) =>
    new RpcException({
      code: 'VALIDATION_FAILED',
      message: `invalid payload: ${errors.map((e) => (PROPERTY.test(e.property) ? e.property : '(property)')).join(', ')}`,
    }),
});

/**
 * Runs before rpcValidationPipe: a payload nested deeper than MAX_JSON_DEPTH (as a request
 * body's) is VALIDATION_FAILED, one of more than MAX_JSON_VALUES values PAYLOAD_TOO_LARGE. The
 * transport's JSON.parse takes any depth, but class-transformer's walk of the payload recurses:
 * a few thousand levels overflowed its stack, and the caller got Nest's untyped "Internal server
 * error". Walked without recursion, stopping at the first level or value past the limits.
 */
export const payloadShapePipe: PipeTransform = {
  transform(value: unknown): unknown {
    const refused = payloadShapeFault(value);
    if (refused) throw new RpcException(refused);
    return value;
  },
};

function payloadShapeFault(value: unknown): { code: string; message: string } | null {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  let values = 0;
  while (stack.length) {
    const next = stack.pop()!;
    if (++values + stack.length > MAX_JSON_VALUES)
      return {
        code: 'PAYLOAD_TOO_LARGE',
        message: `invalid payload: more than ${MAX_JSON_VALUES} JSON values`,
      };
    if (typeof next.value !== 'object' || next.value === null) continue;
    const depth = next.depth + 1;
    if (depth > MAX_JSON_DEPTH)
      return {
        code: 'VALIDATION_FAILED',
        message: `invalid payload: nested deeper than ${MAX_JSON_DEPTH} levels`,
      };
    const inner = next.value as Record<string, unknown>;
    const size = Array.isArray(inner) ? inner.length : Object.keys(inner).length;
    if (values + stack.length + size > MAX_JSON_VALUES)
      return {
        code: 'PAYLOAD_TOO_LARGE',
        message: `invalid payload: more than ${MAX_JSON_VALUES} JSON values`,
      };
    for (const v of Object.values(inner)) stack.push({ value: v, depth });
  }
  return null;
}

/**
 * @MessagePattern needs a constant, and the pattern depends on the agent type: one class per
 * agent. Execute messages run in a CLS context of their own (AgentContextInterceptor), then
 * their shape is validated and their signed assignment verified (AssignmentPipe) before the
 * runner reads anything.
 */
export function createAgentController(agentType: string): Type<unknown> {
  @Controller()
  class AgentExecuteController {
    constructor(private readonly runner: AgentRunner) {}

    // The pipes check the payload only: the context is the transport's, not the caller's.
    @MessagePattern(agentExecutePattern(agentType))
    @UseInterceptors(AgentContextInterceptor)
    execute(
      @Payload(payloadShapePipe, rpcValidationPipe, AssignmentPipe) req: ExecuteAgentRequest,
      @Ctx() ctx: BaseRpcContext,
    ): Promise<ExecuteAgentResult> {
      // The Redis Streams transport says when it stops waiting; Nest's TCP transport does not.
      const transport = ctx instanceof RedisStreamsContext ? ctx.getSignal() : undefined;
      return this.runner.execute(req, transport);
    }

    @MessagePattern(agentHealthPattern(agentType))
    health(): { status: 'ok'; agentType: string } {
      return { status: 'ok', agentType };
    }
  }
  return AgentExecuteController;
}
