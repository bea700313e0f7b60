import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import { ProxiedRedis, sleep, startProxiedRedis } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from './index';

const EVENT = 'agent.resendevent.cancelled';
const handled: unknown[] = [];

@Controller()
class EventController {
  @EventPattern(EVENT)
  handle(@Payload() data: unknown): void {
    handled.push(data);
  }
}
@Module({ controllers: [EventController] })
class EventModule {}

/**
 * An event (`client.emit`) whose XADD ran but whose answer was lost to a connection reset must
 * not be added again when ioredis sends it again once reconnected: its handlers ran it twice (a
 * cancellation or a progress note acted on twice).
 */
describe('Redis Streams transport: an event is not sent again after a reset (private redis-server)', () => {
  let rig: ProxiedRedis;
  let app: INestMicroservice;
  let client: RedisStreamsClient;
  const keyPrefix = 'loomresendev:';

  beforeAll(async () => {
    rig = await startProxiedRedis();
    const strategy = new RedisStreamsServer({ redisUrl: rig.redis.url, keyPrefix, blockMs: 200 });
    app = await NestFactory.createMicroservice(EventModule, { strategy, logger: false });
    await app.listen();
  });
  afterAll(() => rig?.stop(client?.close(), app?.close()));

  it('hands an event that reached Redis just before a reset to its handler once', async () => {
    client = new RedisStreamsClient({
      redisUrl: rig.proxiedUrl,
      keyPrefix,
      blockMs: 10_000,
      commandTimeoutMs: 4000,
    });
    await client.connect();
    await lastValueFrom(client.emit(EVENT, { n: 1 }), { defaultValue: undefined });
    for (let i = 0; i < 100 && handled.length < 1; i++) await sleep(20);

    rig.proxy.resetOnNextAnswer();
    await lastValueFrom(client.emit(EVENT, { n: 2 }), { defaultValue: undefined });
    await sleep(1500); // a copy added again would have been handled by now
    expect(handled).toEqual([{ n: 1 }, { n: 2 }]);
  }, 60_000);
});
