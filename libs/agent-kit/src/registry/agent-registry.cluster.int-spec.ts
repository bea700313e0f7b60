import { RedisClient } from '@loom/session';
import { PrivateRedisCluster } from '@loom/testing';
import { RedisAgentRegistry } from './agent-registry';
import { registryContract, STALE_MS } from './agent-registry.contract';

/**
 * The Redis registry on a Redis Cluster of this suite's own. Its scripts build the keys of a
 * type from KEYS[1] (`agents:{registry}`): the same hash tag, so the same slot.
 */
describe('RedisAgentRegistry on a Redis Cluster', () => {
  let cluster: PrivateRedisCluster;
  let redis: RedisClient;
  let n = 0;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    redis = await cluster.client();
  });
  afterAll(async () => {
    redis?.disconnect();
    await cluster?.stop();
  });

  describe('contract', () =>
    registryContract(
      (staleMs) => new RedisAgentRegistry(redis, 'loomreg:', staleMs),
      () => `tax-${++n}`,
      'redis',
    ));

  it('forgets a type with no live instance, and removes an instance', async () => {
    const registry = new RedisAgentRegistry(redis, 'loomreg:', STALE_MS);
    const type = `retired-${++n}`;
    const descriptor = {
      agentType: type,
      description: 'Income tax questions',
      role: 'specialist' as const,
      intents: [type],
      keywords: ['tax'],
    };
    await registry.heartbeat(descriptor, 'gone-1', Date.now());
    expect((await registry.live()).map((a) => a.descriptor.agentType)).toContain(type);
    await registry.remove(type, 'gone-1');
    expect(await registry.forget(type)).toBe(true);
    expect((await registry.live()).map((a) => a.descriptor.agentType)).not.toContain(type);
  });
});
