import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { ProxiedRedis, sleep, startProxiedRedis } from '@loom/testing';
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
  let rig: ProxiedRedis;
  let app: INestMicroservice;
  let client: RedisStreamsClient;
  const keyPrefix = 'loomresendrd:';

  beforeAll(async () => {
    rig = await startProxiedRedis();
    const strategy = new RedisStreamsServer({
      redisUrl: rig.proxiedUrl,
      keyPrefix,
      blockMs: 20_000,
      claimIdleMs: 120_000,
    });
    app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
    client = new RedisStreamsClient({ redisUrl: rig.redis.url, keyPrefix, timeoutMs: 10_000 });
    await client.connect();
  });
  afterAll(() => rig?.stop(client?.close(), app?.close()));

  it('runs a request whose delivery was lost to a reset of the reader', async () => {
    await sleep(300); // the agent's reader is blocked in its XREADGROUP
    rig.proxy.resetOnNextAnswer(); // its next answer: the request below
    await expect(lastValueFrom(client.send(PATTERN, { n: 1 }))).resolves.toEqual({
      ran: { n: 1 },
    });
  }, 60_000);
});
