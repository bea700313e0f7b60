import { LoomEnv, redisTarget } from '../config/loom-env';
import { openRedis } from '@loom/session';
import { AgentRegistry, MemoryAgentRegistry, RedisAgentRegistry } from './agent-registry';

/** Redis registry when distributed, the in-process one when embedded. */
export function createRegistry(env: LoomEnv): AgentRegistry {
  if (env.LOOM_PROFILE === 'embedded') return new MemoryAgentRegistry();
  const redis = openRedis(redisTarget(env), {
    connectionName: 'loom-registry',
    // A turn reads the registry: a half-open connection must not hold it (and its lock) for the
    // minutes the kernel takes to notice.
    commandTimeout: 2000,
    socketTimeout: 2000, // and the dead socket is dropped and opened again
    maxRetriesPerRequest: 2,
    retryStrategy: (n) => Math.min(n * 100, 2000),
  });
  redis.on('error', () => undefined); // reconnects by itself; heartbeats log their own failures
  return new RedisAgentRegistry(redis, env.LOOM_KEY_PREFIX, undefined, true);
}
