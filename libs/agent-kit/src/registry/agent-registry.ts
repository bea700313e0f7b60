import Redis from 'ioredis';
import { AgentRegistration, RegisteredAgent } from '../contracts/agent-descriptor';

export const AGENT_REGISTRY = Symbol('AGENT_REGISTRY');

/** Where agents announce themselves and orchestrators discover them (adding an agent edits no orchestrator). */
export interface AgentRegistry {
  /** Publishes the descriptor and marks this instance alive (call again as a heartbeat). */
  heartbeat(descriptor: AgentRegistration, instanceId: string): Promise<void>;
  remove(agentType: string, instanceId: string): Promise<void>;
  /** Agents with at least one live instance. */
  live(): Promise<RegisteredAgent[]>;
}

/**
 * Redis registry: a hash of descriptors and, per agent type, a zset of instances scored by their
 * last heartbeat; an instance silent for `staleMs` no longer counts.
 */
export class RedisAgentRegistry implements AgentRegistry {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly staleMs = 15_000,
    private readonly ownsConnection = false,
  ) {}

  /**
   * Closes a connection of its own when the app stops (an open socket keeps an in-process app,
   * e.g. in e2e tests, from exiting). Waits a turn first: every shutdown hook of the module has
   * then issued its calls (the heartbeat's `remove`), and QUIT goes after them.
   */
  async onApplicationShutdown(): Promise<void> {
    if (!this.ownsConnection) return;
    await new Promise((r) => setImmediate(r));
    const quit = this.redis.quit().catch(() => undefined);
    await Promise.race([quit, new Promise((r) => setTimeout(r, 1000).unref())]);
    this.redis.disconnect();
  }

  async heartbeat(descriptor: AgentRegistration, instanceId: string): Promise<void> {
    await this.redis
      .multi()
      .hset(this.descriptorsKey(), descriptor.agentType, JSON.stringify(descriptor))
      .zadd(this.instancesKey(descriptor.agentType), Date.now(), instanceId)
      .zremrangebyscore(
        this.instancesKey(descriptor.agentType),
        '-inf',
        Date.now() - this.staleMs * 4,
      )
      .exec();
  }

  async remove(agentType: string, instanceId: string): Promise<void> {
    await this.redis.zrem(this.instancesKey(agentType), instanceId);
  }

  async live(): Promise<RegisteredAgent[]> {
    const all = await this.redis.hgetall(this.descriptorsKey());
    const types = Object.keys(all).sort();
    if (!types.length) return [];
    const since = Date.now() - this.staleMs;
    const counts = await this.redis
      .pipeline(types.map((t) => ['zcount', this.instancesKey(t), since, '+inf']))
      .exec();
    return types
      .map((t, i) => ({
        descriptor: JSON.parse(all[t]) as AgentRegistration,
        instances: Number(counts?.[i]?.[1] ?? 0),
      }))
      .filter((a) => a.instances > 0);
  }

  private descriptorsKey(): string {
    return `${this.prefix}agents:{registry}`;
  }

  private instancesKey(agentType: string): string {
    return `${this.prefix}agents:{registry}:${agentType}`;
  }
}

/** One process (embedded profile): the same contract in memory. */
export class MemoryAgentRegistry implements AgentRegistry {
  private static readonly agents = new Map<
    string,
    { descriptor: AgentRegistration; instances: Map<string, number> }
  >();

  constructor(private readonly staleMs = 15_000) {}

  async heartbeat(descriptor: AgentRegistration, instanceId: string): Promise<void> {
    const entry = MemoryAgentRegistry.agents.get(descriptor.agentType) ?? {
      descriptor,
      instances: new Map(),
    };
    entry.descriptor = descriptor;
    entry.instances.set(instanceId, Date.now());
    MemoryAgentRegistry.agents.set(descriptor.agentType, entry);
  }

  async remove(agentType: string, instanceId: string): Promise<void> {
    MemoryAgentRegistry.agents.get(agentType)?.instances.delete(instanceId);
  }

  async live(): Promise<RegisteredAgent[]> {
    const since = Date.now() - this.staleMs;
    return [...MemoryAgentRegistry.agents.values()]
      .map((e) => ({
        descriptor: e.descriptor,
        instances: [...e.instances.values()].filter((t) => t >= since).length,
      }))
      .filter((a) => a.instances > 0)
      .sort((a, b) => a.descriptor.agentType.localeCompare(b.descriptor.agentType));
  }
}
