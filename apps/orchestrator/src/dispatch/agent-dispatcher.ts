import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { ClientTCP } from '@nestjs/microservices';
import { firstValueFrom, timeout } from 'rxjs';
import {
  AGENT_REGISTRY,
  AgentRegistry,
  agentExecutePattern,
  boundedMessage,
  ExecuteAgentRequest,
  ExecuteAgentResult,
  LOOM_ENV,
  LoomEnv,
  RedisStreamsClient,
} from '@loom/agent-kit';
import { outsideMdc } from '@loom/observability';
import { LoomError, LoomErrorCode } from '@loom/session';
import { MetricsService } from '../metrics/metrics.service';
import { checkedResult } from './agent-result';

/**
 * The one way business code reaches agents: a typed call with a time-out. Distributed: the
 * Redis Streams client (one consumer per request, replies to this replica only); a call waits
 * AGENT_TIMEOUT_MS without a sign of life, and up to AGENT_MAX_EXECUTION_MS while the agent
 * reports progress. Embedded: Nest's TCP client to the endpoint the agent registered, which
 * carries no progress: a call waits AGENT_TIMEOUT_MS.
 */
@Injectable()
export class AgentDispatcher implements OnModuleInit, OnApplicationShutdown {
  private streams?: RedisStreamsClient;
  private readonly tcp = new Map<string, ClientTCP>();

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    @Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * Connects at start, outside any request: its connections' events (a Redis outage) are then
   * logged without the ids of whichever turn happened to dispatch first. Never waits for Redis.
   */
  async onModuleInit(): Promise<void> {
    if (this.env.LOOM_PROFILE === 'embedded') return;
    this.streams = new RedisStreamsClient({
      redisUrl: this.env.REDIS_URL,
      redisClusterNodes: this.env.redisClusterNodes,
      redisClusterNatMap: this.env.redisClusterNatMap,
      keyPrefix: this.env.LOOM_KEY_PREFIX,
      timeoutMs: this.env.AGENT_TIMEOUT_MS,
      maxExecutionMs: this.env.AGENT_MAX_EXECUTION_MS,
    });
    await this.streams.connect();
  }

  /**
   * Runs one execution on an instance of `agentType`: its checked result, or a LoomError (the
   * agent's code, TIMEOUT, UNAVAILABLE, DEAD_LETTERED). Counted in loom_agent_calls_total by how it ended.
   */
  async execute(agentType: string, request: ExecuteAgentRequest): Promise<ExecuteAgentResult> {
    const measure = this.metrics.agentCall(agentType);
    try {
      const result = await this.call(agentType, request);
      measure.completed(result.replayed === true);
      return result;
    } catch (err) {
      measure.failed(err);
      throw err;
    }
  }

  private async call(agentType: string, request: ExecuteAgentRequest): Promise<ExecuteAgentResult> {
    const client = await this.clientFor(agentType);
    // The streams client ends every call itself; this is the backstop of a client that does not.
    const limitMs = this.streams ? this.env.AGENT_MAX_EXECUTION_MS : this.env.AGENT_TIMEOUT_MS;
    let result: unknown;
    try {
      result = await firstValueFrom(
        client
          .send<ExecuteAgentResult>(agentExecutePattern(agentType), request)
          .pipe(timeout(limitMs + 1000)),
      );
    } catch (err) {
      throw asLoomError(err, agentType);
    }
    return checkedResult(result, agentType);
  }

  async onApplicationShutdown(): Promise<void> {
    await this.streams?.close();
    for (const c of this.tcp.values()) await c.close();
  }

  private async clientFor(agentType: string): Promise<RedisStreamsClient | ClientTCP> {
    if (this.streams) return this.streams;
    const cached = this.tcp.get(agentType);
    if (cached) return cached;
    const agent = (await this.registry.live()).find((a) => a.descriptor.agentType === agentType);
    if (!agent?.descriptor.endpoint)
      throw new LoomError(LoomErrorCode.UNAVAILABLE, `no ${agentType} agent is running`);
    const client = new SharedTcpClient(agent.descriptor.endpoint);
    this.tcp.set(agentType, client);
    return client;
  }
}

/**
 * Nest's TCP client (the embedded profile's), shared by every turn that calls its agent type. Its
 * connection opens (again, after it closed) outside the context of the turn that needs it first:
 * the socket's events (a reset, an error Nest logs) are then no turn's, where they would carry
 * that turn's ids long after it ended (`apps/embedded/test/tcp-client-log-context.e2e-spec.ts`).
 */
class SharedTcpClient extends ClientTCP {
  override connect(): Promise<any> {
    return outsideMdc(() => super.connect());
  }
}

export function asLoomError(err: unknown, agentType: string): LoomError {
  if (LoomError.is(err)) return err;
  const e = err as {
    code?: string;
    message?: string;
    name?: string;
    usage?: unknown;
    modelSaid?: boolean;
    limit?: string;
    retryAfterS?: unknown;
  };
  // What the agent's model calls cost before it failed, when it says.
  const details = e?.usage ? { usage: e.usage } : undefined;
  if (e?.code === 'TIMEOUT' && e.limit === 'total')
    return new LoomError(
      LoomErrorCode.TIMEOUT,
      `${agentType} was still working at the execution limit (AGENT_MAX_EXECUTION_MS)`,
    );
  if (e?.name === 'TimeoutError' || e?.code === 'TIMEOUT')
    return new LoomError(LoomErrorCode.TIMEOUT, `${agentType} did not answer in time`);
  // A model endpoint that is busy: the model client's own words, written for the user (still
  // another program's: bounded like any other message).
  // Its Retry-After (seconds), checked where it becomes a header (retryAfterHeader).
  if (e?.code === 'UNAVAILABLE' && e.modelSaid && typeof e.message === 'string' && e.message.trim())
    return new LoomError(LoomErrorCode.UNAVAILABLE, boundedMessage(e.message), {
      ...details,
      ...(typeof e.retryAfterS === 'number' ? { retryAfterS: e.retryAfterS } : {}),
    });
  if (e?.code === 'UNAVAILABLE')
    return new LoomError(LoomErrorCode.UNAVAILABLE, `${agentType} is unavailable`);
  // Every delivery of the request crashed or stalled its consumer: running it again would too.
  if (e?.code === 'DEAD_LETTERED')
    return new LoomError(
      LoomErrorCode.DEAD_LETTERED,
      `${agentType} could not run the request: it was dead-lettered after repeated deliveries`,
    );
  const code = Object.values(LoomErrorCode).includes(e?.code as LoomErrorCode)
    ? (e.code as LoomErrorCode)
    : LoomErrorCode.AGENT_FAILED;
  // Another program's words: stored with the task and answered to the user, so bounded.
  const message =
    typeof e?.message === 'string' && e.message.trim() !== ''
      ? boundedMessage(e.message)
      : `${agentType} failed`;
  return new LoomError(code, message, details);
}
