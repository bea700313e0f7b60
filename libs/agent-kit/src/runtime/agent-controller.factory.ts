import { Controller, Type, UsePipes, ValidationPipe } from '@nestjs/common';
import { MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import {
  agentExecutePattern,
  ExecuteAgentRequest,
  ExecuteAgentResult,
} from '../contracts/agent-messages';
import { AgentRunner } from './agent-runner';

/** Payloads are validated; a bad one is a typed VALIDATION_FAILED, never a crash. */
export const rpcValidationPipe = new ValidationPipe({
  whitelist: true,
  transform: true,
  exceptionFactory: (errors) =>
    new RpcException({
      code: 'VALIDATION_FAILED',
      message: `invalid payload: ${errors.map((e) => e.property).join(', ')}`,
    }),
});

/** @MessagePattern needs a constant, and the pattern depends on the agent type: one class per agent. */
export function createAgentController(agentType: string): Type<unknown> {
  @Controller()
  class AgentExecuteController {
    constructor(private readonly runner: AgentRunner) {}

    @MessagePattern(agentExecutePattern(agentType))
    @UsePipes(rpcValidationPipe)
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
