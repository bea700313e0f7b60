import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { ProxiedRedis, sleep, startProxiedRedis } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from './index';

const PATTERN = 'agent.resend.execute';
const ran: unknown[] = [];

@Controller()
class CountingController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    ran.push(data);
    return { ran: data };
  }
}
@Module({ controllers: [CountingController] })
class CountingModule {}

/**
 * A request whose XADD ran but whose answer was lost to a connection reset (a Redis restart, a
 * network reset) must not be added again: ioredis sends the commands a dropped connection left
 * unanswered again once it reconnects, and the agent then ran the request twice (a step paid
 * twice, or a second answer racing the first).
 */
describe('Redis Streams transport: a request is not sent again after a reset (private redis-server)', () => {
  let rig: ProxiedRedis;
  let app: INestMicroservice;
  let client: RedisStreamsClient;
  const keyPrefix = 'loomresend:';

  beforeAll(async () => {
    rig = await startProxiedRedis();
    const strategy = new RedisStreamsServer({ redisUrl: rig.redis.url, keyPrefix, blockMs: 200 });
    app = await NestFactory.createMicroservice(CountingModule, { strategy, logger: false });
    await app.listen();
  });
  afterAll(() => rig?.stop(client?.close(), app?.close()));

  const call = (data: unknown): Promise<any> => lastValueFrom(client.send(PATTERN, data));

  it('runs a request that reached Redis just before a reset once, and answers it once', async () => {
    client = new RedisStreamsClient({
      redisUrl: rig.proxiedUrl,
      keyPrefix,
      timeoutMs: 20_000,
      blockMs: 10_000,
      commandTimeoutMs: 4000,
    });
    await client.connect();
    await expect(call({ n: 1 })).resolves.toEqual({ ran: { n: 1 } });
    await sleep(300); // the reply's XDEL answered

    rig.proxy.resetOnNextAnswer();
    const answers: unknown[] = [];
    await new Promise<void>((done) =>
      client.send(PATTERN, { n: 2 }).subscribe({
        next: (value) => answers.push(value),
        error: (err) => (answers.push(err), done()),
        complete: done,
      }),
    );
    await sleep(1500); // a copy added again would have run by now
    expect(ran).toEqual([{ n: 1 }, { n: 2 }]);
    expect(answers).toEqual([{ ran: { n: 2 } }]);
  }, 60_000);
});
