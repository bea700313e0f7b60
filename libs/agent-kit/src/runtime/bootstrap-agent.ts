import { INestMicroservice, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MicroserviceOptions, Transport } from '@nestjs/microservices';
import {
  createPinoLogger,
  handleProcessErrors,
  LoomLogger,
  routeConsoleWarnings,
} from '@loom/observability';
import { redactedReason } from '@loom/security';
import { LoomEnv, loadEnvOrExit } from '../config/loom-env';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { descriptorProblem } from '../contracts/agent-descriptor-check';
import { RedisStreamsServer } from '../transport/redis-streams.server';
import { AgentDefinition, agentService, AgentHandler, isAgentDefinition } from './agent-handler';
import { LoomAgentModule } from './loom-agent.module';

/**
 * Starts an agent app: the Redis Streams transport when distributed (at-least-once, one
 * consumer per request), Nest's TCP transport in the embedded profile.
 */
export async function bootstrapAgent(
  agent: AgentDefinition,
  envOverride?: LoomEnv,
): Promise<INestMicroservice>;
/** The same, for a handler without dependencies of its own. */
export async function bootstrapAgent(
  descriptor: AgentRegistration,
  handler: Type<AgentHandler>,
  envOverride?: LoomEnv,
): Promise<INestMicroservice>;
export async function bootstrapAgent(
  first: AgentDefinition | AgentRegistration,
  second?: Type<AgentHandler> | LoomEnv,
  third?: LoomEnv,
): Promise<INestMicroservice> {
  const agent: AgentDefinition = isAgentDefinition(first)
    ? first
    : { descriptor: first, handler: second as Type<AgentHandler> };
  const envOverride = isAgentDefinition(first) ? (second as LoomEnv | undefined) : third;
  const { descriptor } = agent;
  const problem = descriptorProblem(descriptor);
  if (problem) throw new Error(`the agent's descriptor is invalid: ${problem}`);
  const env = envOverride ?? loadEnvOrExit({}, 'agent');
  const logger = new LoomLogger(
    createPinoLogger({
      service: agentService(descriptor.agentType),
      level: env.LOG_LEVEL,
      format: env.LOG_FORMAT,
    }),
  );
  // Before the Redis client connects: it warns through console.warn (see routeConsoleWarnings).
  routeConsoleWarnings();
  let options: MicroserviceOptions;
  let registration = descriptor;
  if (env.LOOM_PROFILE === 'embedded') {
    const port = env.AGENT_PORT || (await freePort());
    registration = { ...descriptor, endpoint: { host: '127.0.0.1', port } };
    options = { transport: Transport.TCP, options: { host: '127.0.0.1', port } };
  } else {
    options = {
      strategy: new RedisStreamsServer({
        redisUrl: env.REDIS_URL,
        redisClusterNodes: env.redisClusterNodes,
        redisClusterNatMap: env.redisClusterNatMap,
        keyPrefix: env.LOOM_KEY_PREFIX,
        claimIdleMs: env.AGENT_CLAIM_IDLE_MS,
        maxDeliveries: env.AGENT_MAX_DELIVERIES,
        deadLetterRetentionMs: env.AGENT_DEAD_LETTER_RETENTION_MS,
        duplicateDeliveryForTests: env.LOOM_TEST_DUPLICATE_DELIVERY,
      }),
    };
  }
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(
    LoomAgentModule.forRoot({ ...agent, env, descriptor: registration }),
    // A provider that fails (MySQL or Redis out of reach) rejects, for runAgent's one line,
    // instead of Nest exiting the process itself after its own log line.
    { ...options, logger, bufferLogs: false, abortOnError: false },
  );
  app.enableShutdownHooks();
  await app.listen();
  logger.log(`${descriptor.agentType} agent listening (${env.LOOM_PROFILE} profile)`, 'Bootstrap');
  return app;
}

/**
 * An agent app's `main`: starts the agent, or says in one line why it could not (an invalid
 * descriptor, Redis or MySQL unreachable) and exits with code 1.
 */
export function runAgent(agent: AgentDefinition): void {
  // Once started, a handler's promise that fails unawaited is logged (JSON, redacted): it does
  // not end every execution in flight here.
  bootstrapAgent(agent)
    .then(() => handleProcessErrors())
    .catch((err: unknown) => {
      const name =
        typeof agent.descriptor?.agentType === 'string' ? agent.descriptor.agentType : '';
      const why = redactedReason(err);
      process.stderr.write(`loom ${name ? `${name} ` : ''}agent: failed to start: ${why}\n`);
      process.exit(1);
    });
}

async function freePort(): Promise<number> {
  const net = await import('net');
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}
