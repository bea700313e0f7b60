import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { FreezableTcpProxy, PrivateRedisServer, sleep } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from './index';

const PATTERN = 'agent.resendread.execute';

@Controller()
class EchoController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    return { ran: data };
  }
}
@Module({ controllers: [EchoController] })
class EchoModule {}

/**
 * An agent's XREADGROUP whose answer (the requests it delivered to this consumer) was lost to a
 * reset is sent again by ioredis once reconnected, and that second read finds nothing new: the
 * requests sat pending on the agent, unrun, until reclaimed after `claimIdleMs`, by when their
 * callers had given up (TIMEOUT).
 */
describe('Redis Streams transport: requests a lost read delivered are run (private redis-server)', () => {
  let redis: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  let app: INestMicroservice;
  let client: RedisStreamsClient;
  const keyPrefix = 'loomresendrd:';

  beforeAll(async () => {
    redis = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: redis.port });
    const strategy = new RedisStreamsServer({
      redisUrl: `redis://127.0.0.1:${proxy.port}`,
      keyPrefix,
      blockMs: 20_000,
      claimIdleMs: 120_000,
    });
    app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
    client = new RedisStreamsClient({ redisUrl: redis.url, keyPrefix, timeoutMs: 10_000 });
    await client.connect();
  });
  afterAll(async () => {
    await Promise.race([Promise.allSettled([client?.close(), app?.close()]), sleep(5000)]);
    await proxy.close();
    await redis.kill();
  });

  it('runs a request whose delivery was lost to a reset of the reader', async () => {
    await sleep(300); // the agent's reader is blocked in its XREADGROUP
    proxy.resetOnNextAnswer(); // its next answer: the request below
    await expect(lastValueFrom(client.send(PATTERN, { n: 1 }))).resolves.toEqual({
      ran: { n: 1 },
    });
  }, 60_000);
});
