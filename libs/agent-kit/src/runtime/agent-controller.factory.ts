import { Controller, Type, UseInterceptors, ValidationPipe } from '@nestjs/common';
import { BaseRpcContext, Ctx, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
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
      @Payload(rpcValidationPipe, AssignmentPipe) req: ExecuteAgentRequest,
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
