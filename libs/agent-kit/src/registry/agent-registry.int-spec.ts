import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { RedisAgentRegistry } from './agent-registry';
import { registryContract, STALE_MS } from './agent-registry.contract';

/** The Redis registry on a real Redis, under a key prefix of this suite's own. */
describe('RedisAgentRegistry', () => {
  const prefix = createTestPrefix('registry');
  const redis = new Redis(TEST_REDIS_URL);
  let n = 0;
  afterAll(async () => {
    await prefix.cleanup();
    redis.disconnect();
  });

  registryContract(
    () => new RedisAgentRegistry(redis, prefix.prefix, STALE_MS),
    () => `tax-${++n}`,
  );
});
