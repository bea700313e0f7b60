import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { FreezableTcpProxy, PrivateRedisCluster, sleep } from '@loom/testing';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import {
  CONSUMER_GROUP,
  RedisStreamsClient,
  RedisStreamsServer,
  RedisStreamsOptions,
  requestStreamKey,
} from './index';

const PATTERN = 'agent.failover.execute';
const ran: unknown[] = [];

@Controller()
class EchoController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    ran.push(data);
    return { ran: data };
  }
}
@Module({ controllers: [EchoController] })
class EchoModule {}

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20))
    if (await check().catch(() => false)) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * A master killed while the answer of the agent's read (a request, delivered to it) was on its
 * way fails over to its replica, which holds the request pending on the agent: ioredis switches
 * to the promoted replica's connection (a role change, no `+node`) and sends the read again,
 * which finds nothing new. The agent must look back there, or the request waits for the reclaim
 * (claimIdleMs) while its caller gives up. Every node sits behind a proxy (the NAT map leads the
 * agent through it) that holds the lost answer back.
 */
describe('Redis Streams transport on a Redis Cluster: a failover during a delivery', () => {
  let cluster: PrivateRedisCluster;
  let nodePorts: number[];
  let proxies: FreezableTcpProxy[];
  let replica: Redis | undefined;
  let app: INestMicroservice | undefined;
  let client: RedisStreamsClient | undefined;
  const keyPrefix = 'loomfailover:';
  const requestKey = requestStreamKey(keyPrefix, PATTERN);

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start({ replicas: true });
    nodePorts = [...cluster.ports, ...cluster.replicaPorts];
    proxies = await Promise.all(
      nodePorts.map((port) => FreezableTcpProxy.start({ host: '127.0.0.1', port })),
    );
  }, 60_000);
  afterAll(async () => {
    await Promise.allSettled([client?.close(), app?.close()]);
    replica?.disconnect();
    await Promise.all((proxies ?? []).map((proxy) => proxy.close()));
    await cluster?.stop();
  });

  /** An agent reaching every node through its proxy. */
  async function startAgent(options: Partial<RedisStreamsOptions>): Promise<void> {
    const natMap = Object.fromEntries(
      nodePorts.map((port, i) => [
        `127.0.0.1:${port}`,
        { host: '127.0.0.1', port: proxies[i].port },
      ]),
    );
    const strategy = new RedisStreamsServer({
      redisUrl: `redis://127.0.0.1:${proxies[0].port}`,
      redisClusterNodes: proxies.slice(0, cluster.ports.length).map((p) => `127.0.0.1:${p.port}`),
      redisClusterNatMap: natMap,
      keyPrefix,
      blockMs: 20_000,
      ...options,
    });
    app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
  }

  it('answers, once and within its time-out, a request whose delivery a killed master lost', async () => {
    await startAgent({ claimIdleMs: 120_000 });
    client = new RedisStreamsClient({
      redisUrl: cluster.url,
      redisClusterNodes: cluster.seeds,
      keyPrefix,
      timeoutMs: 40_000,
    });
    await client.connect();
    await expect(lastValueFrom(client.send(PATTERN, { n: 0 }))).resolves.toEqual({
      ran: { n: 0 },
    });
    await sleep(300); // the agent's reader is blocked in its XREADGROUP again
    const masterPort = await cluster.portOf(requestKey);
    const replicaPort = cluster.replicaOf(masterPort);
    const proxy = proxies[nodePorts.indexOf(masterPort)];
    proxy.freeze(); // what the master answers the agent from now on is held back

    const reply = lastValueFrom(client.send(PATTERN, { n: 1 }));
    reply.catch(() => undefined);
    // Delivered to the agent's blocked read: pending on its consumer, on the replica as well.
    replica = new Redis(replicaPort, '127.0.0.1');
    await replica.call('READONLY');
    await waitFor('the delivery replicated', async () => {
      const [count] = (await replica!.call('XPENDING', requestKey, CONSUMER_GROUP)) as [number];
      return Number(count) === 1;
    });
    // The master dies with the answer; its address refuses connections from now on.
    await cluster.kill(masterPort);
    await proxy.close();
    await cluster.promoted(replicaPort);

    await expect(reply).resolves.toEqual({ ran: { n: 1 } });
    expect(ran).toEqual([{ n: 0 }, { n: 1 }]);
  }, 90_000);
});
