import { DynamicModule, Module } from '@nestjs/common';
import { ClsModule } from 'nestjs-cls';
import { randomBytes } from 'crypto';
import { SessionModule, SharedClock } from '@loom/session';
import { AssignmentSigner } from '@loom/security';
import { llmConfig, LoomEnv } from '../config/loom-env';
import { LOOM_ENV, sessionOptionsFrom } from '../config/session-options.factory';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { createLlmClient } from '../llm/llm.factory';
import { LLM_CLIENT } from '../llm/llm.types';
import { AGENT_REGISTRY } from '../registry/agent-registry';
import { createRegistry } from '../registry/registry.factory';
import { AGENT_DESCRIPTOR, AGENT_HANDLER, AgentDefinition } from './agent-handler';
import { createAgentController } from './agent-controller.factory';
import { AgentHeartbeat } from './agent-heartbeat.service';
import { AgentRunner, INSTANCE_ID } from './agent-runner';

export interface LoomAgentOptions extends AgentDefinition {
  env: LoomEnv;
  descriptor: AgentRegistration;
}

/** Everything an agent app needs: session library, model, assignment checks, registry, the handler's route. */
@Module({})
export class LoomAgentModule {
  static forRoot(opts: LoomAgentOptions): DynamicModule {
    const instanceId = `${opts.descriptor.agentType}-${randomBytes(6).toString('hex')}`;
    return {
      module: LoomAgentModule,
      imports: [
        ClsModule.forRoot({ global: true }),
        SessionModule.forRootAsync({ useFactory: () => sessionOptionsFrom(opts.env) }),
        ...(opts.imports ?? []),
      ],
      controllers: [createAgentController(opts.descriptor.agentType)],
      providers: [
        { provide: LOOM_ENV, useValue: opts.env },
        { provide: AGENT_DESCRIPTOR, useValue: opts.descriptor },
        { provide: INSTANCE_ID, useValue: instanceId },
        { provide: AGENT_HANDLER, useClass: opts.handler },
        {
          provide: LLM_CLIENT,
          useFactory: () => createLlmClient(llmConfig(opts.env)),
        },
        {
          provide: AssignmentSigner,
          useFactory: (clock: SharedClock) =>
            new AssignmentSigner(requiredAgentSecret(opts.env), clock),
          inject: [SharedClock],
        },
        { provide: AGENT_REGISTRY, useFactory: () => createRegistry(opts.env) },
        AgentRunner,
        AgentHeartbeat,
        ...(opts.providers ?? []),
      ],
    };
  }
}

/** LOOM_AGENT_SECRET as parseEnv left it (the embedded profile draws one when none is set). */
export function requiredAgentSecret(env: LoomEnv): string {
  if (!env.LOOM_AGENT_SECRET) throw new Error('LOOM_AGENT_SECRET: required (16+ characters)');
  return env.LOOM_AGENT_SECRET;
}
