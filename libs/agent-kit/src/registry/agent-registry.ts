import { RedisClient } from '@loom/session';
import { AgentRegistration, RegisteredAgent } from '../contracts/agent-descriptor';
import { wellFormedDescriptor } from '../contracts/agent-descriptor-check';

export const AGENT_REGISTRY = Symbol('AGENT_REGISTRY');

/** The registration a type's planning reads: its most recently started live instance's. */
export interface InForceRegistration {
  instanceId: string;
  /** When that instance started (ms since the epoch, on Redis's clock: see AgentHeartbeat). */
  startedAt: number;
  descriptor: AgentRegistration;
}

/** What a heartbeat learns: null when this instance's descriptor is the one in force. */
export interface HeartbeatResult {
  inForce: InForceRegistration | null;
}

/** Where agents announce themselves and orchestrators discover them (adding an agent edits no orchestrator). */
export interface AgentRegistry {
  /**
   * Marks this instance alive with its descriptor and start time (call again as a heartbeat).
   * Instances of one type may register different descriptors (a rolling deploy): the type's
   * descriptor is that of its most recently started live instance (ties: the greater instance
   * id), and the next newest one's once that instance leaves or falls silent.
   */
  heartbeat(
    descriptor: AgentRegistration,
    instanceId: string,
    startedAt: number,
  ): Promise<HeartbeatResult>;
  remove(agentType: string, instanceId: string): Promise<void>;
  /** Agents with at least one live instance, each with the descriptor in force. */
  live(): Promise<RegisteredAgent[]>;
}

/**
 * Keys of one agent type, under the descriptors hash `<D>` (all in the `{registry}` hash slot,
 * so the scripts run on Redis Cluster too): `<D>:<type>` its instances by last heartbeat,
 * `<D>:<type>:started` by start time, `<D>:<type>:descriptors` each instance's descriptor.
 * Heartbeats are timed by Redis's clock (`serverNow()`, ms), never a host's: instances and
 * orchestrators on hosts whose clocks disagree still agree on who is live.
 * `IN_FORCE(D, type, since)` is the newest started instance heard from since `since` that has a
 * descriptor: its id, start time and descriptor, or nil. Read eight at a time, newest first: the
 * newest is live but for a moment, and LIVE runs it for every type at every turn.
 */
const IN_FORCE = `
local function serverNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function inForce(d, t, since)
  local from = 0
  repeat
    local started = redis.call('ZREVRANGE', d .. ':' .. t .. ':started', from, from + 7, 'WITHSCORES')
    for i = 1, #started, 2 do
      local beat = redis.call('ZSCORE', d .. ':' .. t, started[i])
      if beat and tonumber(beat) >= since then
        local desc = redis.call('HGET', d .. ':' .. t .. ':descriptors', started[i])
        if desc then return { started[i], started[i + 1], desc } end
      end
    end
    from = from + 8
  until #started < 16
  return nil
end
`;

/**
 * One heartbeat: KEYS the descriptors hash, the type's three keys and its departures; ARGV type,
 * instance id, the agent's clock (unused: Redis's is the beat's time), its start time, its
 * descriptor, the staleness (ms). Records the instance, forgets those silent for four times the
 * staleness, and keeps the hash's entry of the type (what registries before start times read) at
 * the descriptor in force. Returns nil when this instance's descriptor is in force, else the
 * in-force instance's id, start time and descriptor.
 * A beat of an instance that left (`REMOVE`) records nothing: it was sent before the instance
 * left, and reached Redis late (held up in the network, or sent again after a reconnect).
 * An instance no longer in the heartbeat zset (an agent of a version before start times prunes
 * only that one) leaves the other two as well (scanned for only when ZINTERCARD finds one). Both
 * expire four times the staleness after the type's last beat: a type whose instances all died
 * (no `remove`, so no next heartbeat) leaves no start times or descriptors behind for good.
 */
const HEARTBEAT = `${IN_FORCE}
local d, t, id = KEYS[1], ARGV[1], ARGV[2]
local now, stale = serverNow(), tonumber(ARGV[6])
local beats, started, descs = KEYS[2], KEYS[3], KEYS[4]
if redis.call('ZSCORE', KEYS[5], id) then return nil end
redis.call('ZADD', beats, now, id)
redis.call('ZADD', started, ARGV[4], id)
redis.call('HSET', descs, id, ARGV[5])
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', beats, '-inf', now - stale * 4)) do
  redis.call('ZREM', beats, gone)
  redis.call('ZREM', started, gone)
  redis.call('HDEL', descs, gone)
end
if redis.call('ZINTERCARD', 2, started, beats) < redis.call('ZCARD', started) then
  for _, gone in ipairs(redis.call('ZRANGE', started, 0, -1)) do
    if not redis.call('ZSCORE', beats, gone) then
      redis.call('ZREM', started, gone)
      redis.call('HDEL', descs, gone)
    end
  end
end
redis.call('PEXPIRE', started, stale * 4)
redis.call('PEXPIRE', descs, stale * 4)
local f = inForce(d, t, now - stale)
if not f then return nil end
if redis.call('HGET', d, t) ~= f[3] then redis.call('HSET', d, t, f[3]) end
if f[3] == ARGV[5] then return nil end
return f`;

/**
 * The descriptors (KEYS[1]) with each type's instances heard from within ARGV[1] ms: type,
 * descriptor in force, count, flattened. A type none of whose live instances recorded a
 * descriptor of its own (agents of a version before start times) reads the hash's.
 */
const LIVE = `${IN_FORCE}
local all = redis.call('HGETALL', KEYS[1])
local since = serverNow() - tonumber(ARGV[1])
local out = {}
for i = 1, #all, 2 do
  local f = inForce(KEYS[1], all[i], since)
  out[#out + 1] = all[i]
  out[#out + 1] = f and f[3] or all[i + 1]
  out[#out + 1] = redis.call('ZCOUNT', KEYS[1] .. ':' .. all[i], since, '+inf')
end
return out`;

/**
 * KEYS the descriptors hash, the type's three keys and its departures, ARGV the type and the
 * staleness (ms): 1 and everything of the type deleted, or 0 when an instance was heard from
 * within it. The departures stay (they expire by themselves, see REMOVE): a beat of an instance
 * that left, landing after this, must still record nothing, or the retired type runs again.
 */
const FORGET = `${IN_FORCE}
if redis.call('ZCOUNT', KEYS[2], serverNow() - tonumber(ARGV[2]), '+inf') > 0 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1`;

/**
 * An instance leaves: KEYS the type's three keys and its departures (a zset by Redis's time),
 * ARGV the instance id and the staleness (ms). A beat of it that lands after this records
 * nothing (see HEARTBEAT); its departure is kept four times the staleness, as long as a silent
 * instance is kept.
 */
const REMOVE = `${IN_FORCE}
local id, now, keep = ARGV[1], serverNow(), tonumber(ARGV[2]) * 4
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('ZADD', KEYS[4], now, id)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - keep)
redis.call('PEXPIRE', KEYS[4], keep)
return 1`;

type RemoveCommand = (...keysAndArgs: (string | number)[]) => Promise<number>;
type ForgetCommand = (...keysAndArgs: (string | number)[]) => Promise<number>;
type LiveCommand = (key: string, staleMs: number) => Promise<string[]>;
type HeartbeatCommand = (...keysAndArgs: (string | number)[]) => Promise<string[] | null>;

/**
 * Redis registry: a hash of the descriptor in force per agent type and, per type, its instances
 * by last heartbeat (Redis's clock) and by start time, with each one's descriptor; an instance
 * silent for `staleMs` no longer counts, and one silent for four times that is forgotten at the
 * type's next heartbeat.
 */
export class RedisAgentRegistry implements AgentRegistry {
  constructor(
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly staleMs = 15_000,
    private readonly ownsConnection = false,
  ) {
    if (!('loomRegistryLive' in redis))
      redis.defineCommand('loomRegistryLive', { numberOfKeys: 1, lua: LIVE });
    if (!('loomRegistryForget' in redis))
      redis.defineCommand('loomRegistryForget', { numberOfKeys: 5, lua: FORGET });
    if (!('loomRegistryHeartbeat' in redis))
      redis.defineCommand('loomRegistryHeartbeat', { numberOfKeys: 5, lua: HEARTBEAT });
    if (!('loomRegistryRemove' in redis))
      redis.defineCommand('loomRegistryRemove', { numberOfKeys: 4, lua: REMOVE });
  }

  /** Departures (`remove`) not settled yet: the connection stays open for them. */
  private readonly leaving = new Set<Promise<unknown>>();

  /**
   * Closes a connection of its own when the app stops (an open socket keeps an in-process app,
   * e.g. in e2e tests, from exiting). Waits a turn first: every shutdown hook of the module has
   * then issued its calls (the heartbeat's `remove`), and QUIT goes after them. A departure still
   * waiting for Redis (out of reach for a moment) is given its whole command time-out first:
   * closing the connection under it would leave the stopped instance listed for the staleness.
   */
  async onApplicationShutdown(): Promise<void> {
    if (!this.ownsConnection) return;
    await new Promise((r) => setImmediate(r));
    await Promise.allSettled([...this.leaving]);
    const quit = this.redis.quit().catch(() => undefined);
    await Promise.race([quit, new Promise((r) => setTimeout(r, 1000).unref())]);
    this.redis.disconnect();
  }

  /** One script, one round trip. */
  async heartbeat(
    descriptor: AgentRegistration,
    instanceId: string,
    startedAt: number,
  ): Promise<HeartbeatResult> {
    const beat = (this.redis as unknown as Record<string, HeartbeatCommand>).loomRegistryHeartbeat;
    const own = JSON.stringify(descriptor);
    const f = await beat.call(
      this.redis,
      this.descriptorsKey(),
      ...this.typeKeys(descriptor.agentType),
      this.leftKey(descriptor.agentType),
      descriptor.agentType,
      instanceId,
      Date.now(),
      startedAt,
      own,
      this.staleMs,
    );
    if (!f) return { inForce: null };
    const inForce = parsed(f[2]);
    // Another program's malformed registration is in force: nothing this instance can name.
    return {
      inForce: inForce && { instanceId: f[0], startedAt: Number(f[1]), descriptor: inForce },
    };
  }

  /** Also refuses the instance's later beats: one sent before may still reach Redis after. */
  async remove(agentType: string, instanceId: string): Promise<void> {
    const remove = (this.redis as unknown as Record<string, RemoveCommand>).loomRegistryRemove;
    const left = remove.call(
      this.redis,
      ...this.typeKeys(agentType),
      this.leftKey(agentType),
      instanceId,
      this.staleMs,
    );
    this.leaving.add(left);
    try {
      await left;
    } finally {
      this.leaving.delete(left);
    }
  }

  /**
   * Removes a type from the registry (its descriptor and its instances' keys), only while no
   * instance of it has been heard from within the staleness: a retired type leaves nothing
   * behind but its recent departures, which expire by themselves (four times the staleness) and
   * keep a late beat of a stopped instance from bringing the type back. False when one still runs.
   */
  async forget(agentType: string): Promise<boolean> {
    const forget = (this.redis as unknown as Record<string, ForgetCommand>).loomRegistryForget;
    const done = await forget.call(
      this.redis,
      this.descriptorsKey(),
      ...this.typeKeys(agentType),
      this.leftKey(agentType),
      agentType,
      this.staleMs,
    );
    return done === 1;
  }

  /** One round trip (every turn plans with it): the descriptors and their live counts. */
  async live(): Promise<RegisteredAgent[]> {
    const live = (this.redis as unknown as Record<string, LiveCommand>).loomRegistryLive;
    const flat = await live.call(this.redis, this.descriptorsKey(), this.staleMs);
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

  /** The instances of a type that left (`remove`), by when (Redis's clock). */
  private leftKey(agentType: string): string {
    return `${this.typeKeys(agentType)[0]}:left`;
  }

  /** A type's instances by last heartbeat, by start time, and each one's descriptor. */
  private typeKeys(agentType: string): [string, string, string] {
    const instances = `${this.prefix}agents:{registry}:${agentType}`;
    return [instances, `${instances}:started`, `${instances}:descriptors`];
  }
}

interface MemoryInstance {
  beat: number;
  startedAt: number;
  descriptor: AgentRegistration;
}

/** One process (embedded profile): the same contract in memory. */
export class MemoryAgentRegistry implements AgentRegistry {
  private static readonly agents = new Map<string, Map<string, MemoryInstance>>();

  constructor(private readonly staleMs = 15_000) {}

  async heartbeat(
    descriptor: AgentRegistration,
    instanceId: string,
    startedAt: number,
  ): Promise<HeartbeatResult> {
    const now = Date.now();
    const instances = MemoryAgentRegistry.agents.get(descriptor.agentType) ?? new Map();
    instances.set(instanceId, { beat: now, startedAt, descriptor });
    for (const [id, i] of instances) if (i.beat <= now - this.staleMs * 4) instances.delete(id);
    MemoryAgentRegistry.agents.set(descriptor.agentType, instances);
    const [newest] = this.liveOf(instances, now);
    if (JSON.stringify(newest[1].descriptor) === JSON.stringify(descriptor))
      return { inForce: null };
    const inForce = wellFormedDescriptor(newest[1].descriptor);
    return {
      inForce: inForce && {
        instanceId: newest[0],
        startedAt: newest[1].startedAt,
        descriptor: inForce,
      },
    };
  }

  async remove(agentType: string, instanceId: string): Promise<void> {
    MemoryAgentRegistry.agents.get(agentType)?.delete(instanceId);
  }

  async live(): Promise<RegisteredAgent[]> {
    const now = Date.now();
    const out: RegisteredAgent[] = [];
    for (const instances of MemoryAgentRegistry.agents.values()) {
      const live = this.liveOf(instances, now);
      const descriptor = live.length ? wellFormedDescriptor(live[0][1].descriptor) : null;
      if (descriptor) out.push({ descriptor, instances: live.length });
    }
    return out.sort((a, b) => (a.descriptor.agentType < b.descriptor.agentType ? -1 : 1));
  }

  /** The live instances, newest started first (ties: the greater id, as Redis orders them). */
  private liveOf(instances: Map<string, MemoryInstance>, now: number): [string, MemoryInstance][] {
    return [...instances]
      .filter(([, i]) => i.beat >= now - this.staleMs)
      .sort(([aId, a], [bId, b]) => b.startedAt - a.startedAt || (aId < bId ? 1 : -1));
  }
}

function parsed(json: string): AgentRegistration | null {
  try {
    return wellFormedDescriptor(JSON.parse(json));
  } catch {
    return null;
  }
}
