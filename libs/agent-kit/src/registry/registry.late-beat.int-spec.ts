import Redis from 'ioredis';
import { FreezableTcpProxy, PrivateRedisServer, sleep } from '@loom/testing';
import { LoomEnv } from '../config/loom-env';
import { RedisAgentRegistry } from './agent-registry';
import { createRegistry } from './registry.factory';

const descriptor = {
  agentType: 'late-beat',
  description: 'Late heartbeats',
  role: 'specialist' as const,
  intents: ['late-beat'],
  keywords: ['late'],
};

/**
 * An agent leaves the registry when it stops. A heartbeat it sent before, held up in the network
 * (or sent again by the connection after a reconnect), may reach Redis after that: it must not
 * bring the stopped instance back, or orchestrators route to it until the staleness runs out
 * (each of those turns waiting AGENT_TIMEOUT_MS).
 */
describe('Registry: a heartbeat that lands after the deregistration (private redis-server)', () => {
  let server: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  const prefix = 'loomlatebeat:';
  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: server.port });
  });
  afterAll(async () => {
    await proxy.close();
    await server.kill();
  });

  it('leaves a stopped instance out of the live agents', async () => {
    const env = {
      LOOM_PROFILE: 'distributed',
      REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
      LOOM_KEY_PREFIX: prefix,
    } as LoomEnv;
    const registry = createRegistry(env) as RedisAgentRegistry;
    const admin = new Redis(server.url);
    const orchestrator = new RedisAgentRegistry(admin, prefix);
    try {
      const startedAt = Date.now();
      await registry.heartbeat(descriptor, 'agent-1', startedAt);
      expect((await orchestrator.live()).map((a) => a.instances)).toEqual([1]);

      // A beat held up in the network: it fails its time-out, the connection is opened again.
      proxy.strand();
      await expect(registry.heartbeat(descriptor, 'agent-1', startedAt)).rejects.toThrow();
      // The held-up connection dropped, a new one opened: the agent shuts down, and leaves.
      for (let i = 0; i < 100 && proxy.accepted < 2; i++) await sleep(50);
      for (let i = 0; ; i++) {
        const removed = await registry.remove(descriptor.agentType, 'agent-1').then(
          () => true,
          () => i > 50 && Promise.reject(new Error('never removed')),
        );
        if (removed) break;
        await sleep(100);
      }
      expect(await orchestrator.live()).toEqual([]);

      // The held-up beat reaches Redis now; wait until Redis has read all of it (its connection
      // ended after it).
      const [port] = proxy.deliverStranded();
      for (let i = 0; i < 100; i++) {
        const clients = (await admin.client('LIST')) as string;
        if (!clients.includes(`:${port} `)) break;
        await sleep(50);
      }
      expect(await orchestrator.live()).toEqual([]);
    } finally {
      await registry.onApplicationShutdown();
      admin.disconnect();
    }
  }, 30_000);

  // An agent stops while its Redis is briefly out of reach: its heartbeat service leaves the
  // registry while the registry's own shutdown closes the connection (both shutdown hooks run
  // together). Closing it a second after QUIT dropped the departure still waiting for Redis
  // (given 2 s, its command time-out), and the stopped instance stayed listed, planned for, for
  // the staleness (15 s).
  it('lets a departure sent as the agent stops wait for Redis before the connection closes', async () => {
    const env = {
      LOOM_PROFILE: 'distributed',
      REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
      LOOM_KEY_PREFIX: prefix,
    } as LoomEnv;
    const registry = createRegistry(env) as RedisAgentRegistry;
    const admin = new Redis(server.url);
    const orchestrator = new RedisAgentRegistry(admin, prefix);
    try {
      await registry.heartbeat(descriptor, 'agent-2', Date.now());
      expect((await orchestrator.live()).map((a) => a.instances)).toEqual([1]);

      proxy.freeze(); // Redis out of reach for a moment, within the departure's time-out
      const left = registry.remove(descriptor.agentType, 'agent-2');
      const closed = registry.onApplicationShutdown();
      await sleep(1500);
      proxy.thaw();
      await Promise.all([left, closed]);
      expect(await orchestrator.live()).toEqual([]);
    } finally {
      proxy.thaw();
      await registry.onApplicationShutdown();
      admin.disconnect();
    }
  }, 30_000);
});
