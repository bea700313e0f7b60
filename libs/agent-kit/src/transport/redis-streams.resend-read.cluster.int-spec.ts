import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { FreezableTcpProxy, PrivateRedisCluster, sleep } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { RedisClient } from '@loom/session';
import { ConsumerGroup } from './redis-streams.group';
import {
  CONSUMER_GROUP,
  RedisStreamsClient,
  RedisStreamsServer,
  RedisStreamsOptions,
  requestStreamKey,
} from './index';

const PATTERN = 'agent.resendreadcluster.execute';
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
    if (await check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * On a cluster, a reset of one master's connection is not a reconnect of the Cluster client:
 * ioredis drops that node, sends the command again on a new one and emits no `ready`. What a
 * lost XREADGROUP had delivered (or a lost XAUTOCLAIM taken over) sat pending on the agent,
 * unrun, until reclaimed after `claimIdleMs`, by when its caller had given up (TIMEOUT). Each
 * master sits behind a proxy (the NAT map leads the agent through it) that the test resets.
 */
describe('Redis Streams transport on a Redis Cluster: requests a lost read or reclaim brought are run', () => {
  let cluster: PrivateRedisCluster;
  let proxies: FreezableTcpProxy[];
  let redis: RedisClient;
  let app: INestMicroservice | undefined;
  let client: RedisStreamsClient | undefined;
  let keyPrefix = '';
  let testNo = 0;

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    redis = await cluster.client();
    proxies = await Promise.all(
      cluster.ports.map((port) => FreezableTcpProxy.start({ host: '127.0.0.1', port })),
    );
  }, 60_000);
  beforeEach(() => {
    keyPrefix = `loomresendc${++testNo}:`;
    ran.length = 0;
  });
  afterEach(async () => {
    await Promise.allSettled([client?.close(), app?.close()]);
    client = app = undefined;
  });
  afterAll(async () => {
    redis?.disconnect();
    await Promise.all((proxies ?? []).map((proxy) => proxy.close()));
    await cluster?.stop();
  });

  /** An agent reaching every master through its proxy. */
  async function startAgent(options: Partial<RedisStreamsOptions>): Promise<void> {
    const natMap = Object.fromEntries(
      cluster.ports.map((port, i) => [
        `127.0.0.1:${port}`,
        { host: '127.0.0.1', port: proxies[i].port },
      ]),
    );
    const strategy = new RedisStreamsServer({
      redisUrl: `redis://127.0.0.1:${proxies[0].port}`,
      redisClusterNodes: proxies.map((proxy) => `127.0.0.1:${proxy.port}`),
      redisClusterNatMap: natMap,
      keyPrefix,
      blockMs: 20_000,
      ...options,
    });
    app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
  }
  async function startClient(timeoutMs: number): Promise<RedisStreamsClient> {
    client = new RedisStreamsClient({
      redisUrl: cluster.url,
      redisClusterNodes: cluster.seeds,
      keyPrefix,
      timeoutMs,
    });
    await client.connect();
    return client;
  }
  /** The proxy in front of the master holding the request stream. */
  const proxyOfStream = async () =>
    proxies[cluster.ports.indexOf(await cluster.portOf(requestStreamKey(keyPrefix, PATTERN)))];

  it("runs a request whose delivery was lost to a reset of its master's connection", async () => {
    await startAgent({ claimIdleMs: 120_000 });
    const client = await startClient(10_000);
    await expect(lastValueFrom(client.send(PATTERN, { n: 0 }))).resolves.toEqual({
      ran: { n: 0 },
    });
    await sleep(300); // the agent's reader is blocked in its XREADGROUP again
    // The next answer on the stream's master: the request below, delivered to the agent.
    (await proxyOfStream()).resetOnNextAnswer();
    await expect(lastValueFrom(client.send(PATTERN, { n: 1 }))).resolves.toEqual({
      ran: { n: 1 },
    });
    expect(ran).toEqual([{ n: 0 }, { n: 1 }]);
  }, 60_000);

  it('runs a request taken over from a dead instance whose XAUTOCLAIM answer was lost', async () => {
    // The caller waits 12 s; the reclaim looks every 5 s at entries idle for 10 s: a request
    // whose claim is lost at 5 s is claimed again at 15 s at the earliest.
    const client = await startClient(12_000);
    const requestKey = requestStreamKey(keyPrefix, PATTERN);
    const reply = lastValueFrom(client.send(PATTERN, { n: 1 }));
    reply.catch(() => undefined);
    await waitFor('the request queued', async () => (await redis.xlen(requestKey)) === 1);
    // An instance died holding it: pending on its consumer, idle long enough to be reclaimed.
    await new ConsumerGroup('dead', new Map([[requestKey, PATTERN]])).create(redis);
    const [[, [[id]]]] = (await redis.call(
      ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, 'dead', 'COUNT', 1, 'STREAMS', requestKey, '>'],
    )) as [string, [string, unknown][]][];
    await redis.call('XCLAIM', requestKey, CONSUMER_GROUP, 'dead', 0, id, 'IDLE', 60_000);

    await startAgent({ claimIdleMs: 10_000 });
    (await proxyOfStream()).resetOnAnswerTo('XAUTOCLAIM'); // the first reclaim: answer lost

    await expect(reply).resolves.toEqual({ ran: { n: 1 } });
    expect(ran).toEqual([{ n: 1 }]);
  }, 60_000);
});
