import { Controller, Type, UseInterceptors, UsePipes, ValidationPipe } from '@nestjs/common';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import {
  agentExecutePattern,
  ExecuteAgentRequest,
  ExecuteAgentResult,
} from '../contracts/agent-messages';
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

    @MessagePattern(agentExecutePattern(agentType))
    @UseInterceptors(AgentContextInterceptor)
    @UsePipes(rpcValidationPipe, AssignmentPipe)
    execute(@Payload() req: ExecuteAgentRequest): Promise<ExecuteAgentResult> {
      return this.runner.execute(req);
    }

    @MessagePattern(`agent.${agentType}.health`)
    health(): { status: 'ok'; agentType: string } {
      return { status: 'ok', agentType };
    }
  }
  return AgentExecuteController;
}
