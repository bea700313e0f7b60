import { LoomEnv } from '../config/loom-env';
import Redis from 'ioredis';
import { AgentRegistry, MemoryAgentRegistry, RedisAgentRegistry } from './agent-registry';

/** Redis registry when distributed, the in-process one when embedded. */
export function createRegistry(env: LoomEnv): AgentRegistry {
  if (env.LOOM_PROFILE === 'embedded') return new MemoryAgentRegistry();
  const redis = new Redis(env.REDIS_URL, {
    connectionName: 'loom-registry',
    maxRetriesPerRequest: 2,
    retryStrategy: (n) => Math.min(n * 100, 2000),
  });
  redis.on('error', () => undefined); // reconnects by itself; heartbeats log their own failures
  return new RedisAgentRegistry(redis, env.LOOM_KEY_PREFIX, undefined, true);
}
