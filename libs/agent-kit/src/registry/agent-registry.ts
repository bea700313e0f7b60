import Redis from 'ioredis';
import { AgentRegistration, RegisteredAgent } from '../contracts/agent-descriptor';
import { wellFormedDescriptor } from '../contracts/agent-descriptor-check';

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
 * The descriptors (KEYS[1]) with each type's instances heard from since ARGV[1]: type,
 * descriptor, count, flattened. The instance zsets are `<KEYS[1]>:<type>`, in the same hash slot
 * (`{registry}`), so the script runs on Redis Cluster too.
 */
const LIVE = `
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = all[i + 1]
  out[#out + 1] = redis.call('ZCOUNT', KEYS[1] .. ':' .. all[i], ARGV[1], '+inf')
end
return out`;

type LiveCommand = (key: string, since: number) => Promise<string[]>;

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
  ) {
    if (!('loomRegistryLive' in redis))
      redis.defineCommand('loomRegistryLive', { numberOfKeys: 1, lua: LIVE });
  }

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

  /** One round trip (every turn plans with it): the descriptors and their live counts. */
  async live(): Promise<RegisteredAgent[]> {
    const since = Date.now() - this.staleMs;
    const live = (this.redis as unknown as Record<string, LiveCommand>).loomRegistryLive;
    const flat = await live.call(this.redis, this.descriptorsKey(), since);
    const out: RegisteredAgent[] = [];
    for (let i = 0; i < flat.length; i += 3) {
      const instances = Number(flat[i + 2]);
      // Written by agents, any program: one that is not a well-formed descriptor (of its own
      // field name) is left out rather than break the planning of every turn.
      const descriptor = instances > 0 ? parsed(flat[i + 1]) : null;
      if (descriptor?.agentType === flat[i]) out.push({ descriptor, instances });
    }
    return out.sort((a, b) => (a.descriptor.agentType < b.descriptor.agentType ? -1 : 1));
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
      .filter((a) => a.instances > 0 && wellFormedDescriptor(a.descriptor))
      .sort((a, b) => a.descriptor.agentType.localeCompare(b.descriptor.agentType));
  }
}

function parsed(json: string): AgentRegistration | null {
  try {
    return wellFormedDescriptor(JSON.parse(json));
  } catch {
    return null;
  }
}
