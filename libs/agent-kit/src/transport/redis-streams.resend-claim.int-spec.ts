import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { FreezableTcpProxy, PrivateRedisServer, sleep } from '@loom/testing';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { ConsumerGroup } from './redis-streams.group';
import { CONSUMER_GROUP } from './redis-streams.options';
import { RedisStreamsClient, RedisStreamsServer, requestStreamKey } from './index';

const PATTERN = 'agent.resendclaim.execute';

@Controller()
class EchoController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    return { ran: data };
  }
}
@Module({ controllers: [EchoController] })
class EchoModule {}

async function waitFor(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20))
    if (await check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * An agent's XAUTOCLAIM whose answer (the requests it took over from a dead instance) was lost
 * to a reset is sent again by ioredis once reconnected; that copy finds nothing (the first one
 * reset their idle time), while the requests sit pending on the agent, unrun, for claimIdleMs
 * more, by when their callers had given up (TIMEOUT).
 */
describe('Redis Streams transport: requests a lost reclaim took over are run (private redis-server)', () => {
  let server: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  let redis: Redis;
  let app: INestMicroservice | undefined;
  let client: RedisStreamsClient | undefined;
  const keyPrefix = 'loomresendcl:';
  const requestKey = requestStreamKey(keyPrefix, PATTERN);

  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: server.port });
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.allSettled([client?.close(), app?.close()]);
    redis.disconnect();
    await proxy.close();
    await server.kill();
  });

  it('runs a request taken over from a dead instance whose XAUTOCLAIM answer was lost', async () => {
    // The caller waits 12 s; the reclaim looks every 5 s at entries idle for 10 s: a request
    // whose claim is lost at 5 s is claimed again at 15 s at the earliest.
    client = new RedisStreamsClient({ redisUrl: server.url, keyPrefix, timeoutMs: 12_000 });
    await client.connect();
    const reply = lastValueFrom(client.send(PATTERN, { n: 1 }));
    reply.catch(() => undefined);
    await waitFor('the request queued', async () => (await redis.xlen(requestKey)) === 1);
    // An instance died holding it: pending on its consumer, idle long enough to be reclaimed.
    await new ConsumerGroup('dead', new Map([[requestKey, PATTERN]])).create(redis);
    const [[, [[id]]]] = (await redis.call(
      ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, 'dead', 'COUNT', 1, 'STREAMS', requestKey, '>'],
    )) as [string, [string, unknown][]][];
    await redis.call('XCLAIM', requestKey, CONSUMER_GROUP, 'dead', 0, id, 'IDLE', 60_000);

    const strategy = new RedisStreamsServer({
      redisUrl: `redis://127.0.0.1:${proxy.port}`,
      keyPrefix,
      blockMs: 20_000,
      claimIdleMs: 10_000,
    });
    app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
    proxy.resetOnAnswerTo('XAUTOCLAIM'); // the agent's first reclaim, in 5 s: its answer lost

    await expect(reply).resolves.toEqual({ ran: { n: 1 } });
  }, 30_000);
});
