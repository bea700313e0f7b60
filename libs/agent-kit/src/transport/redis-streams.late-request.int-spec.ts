import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import Redis from 'ioredis';
import { FreezableTcpProxy, PrivateRedisServer, sleep } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from './index';
import { requestStreamKey } from './redis-streams.options';

const PATTERN = 'agent.count.execute';
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
 * A request whose XADD went unanswered for the command time-out fails `UNAVAILABLE` (503 to the
 * HTTP caller, who may retry it under the same Idempotency-Key). ioredis sends it again once
 * Redis answers (its unfulfilled and offline commands): it must not run then.
 */
describe('Redis Streams transport: a request its caller gave up on (private redis-server)', () => {
  let redis: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  let app: INestMicroservice;
  let client: RedisStreamsClient;
  const clients: RedisStreamsClient[] = [];
  const keyPrefix = 'loomlate:';

  beforeAll(async () => {
    redis = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: redis.port });
    const strategy = new RedisStreamsServer({ redisUrl: redis.url, keyPrefix, blockMs: 200 });
    app = await NestFactory.createMicroservice(CountingModule, { strategy, logger: false });
    await app.listen();
  });
  afterAll(async () => {
    proxy.thaw();
    const closing = [client, ...clients].map((c) => c?.close());
    await Promise.race([Promise.allSettled([...closing, app?.close()]), sleep(5000)]);
    await proxy.close();
    await redis.kill();
  });

  const call = (data: unknown): Promise<any> => lastValueFrom(client.send(PATTERN, data));

  /** Every request taken and finished (entries are deleted once answered or skipped). */
  const drained = async (): Promise<void> => {
    const admin = new Redis(redis.url);
    try {
      const key = requestStreamKey(keyPrefix, PATTERN);
      for (let i = 0; i < 100 && (await admin.xlen(key)) > 0; i++) await sleep(100);
      expect(await admin.xlen(key)).toBe(0);
    } finally {
      admin.disconnect();
    }
  };

  it('never runs a request that failed UNAVAILABLE once Redis answers again', async () => {
    client = new RedisStreamsClient({
      redisUrl: `redis://127.0.0.1:${proxy.port}`,
      keyPrefix,
      timeoutMs: 20_000,
      commandTimeoutMs: 1000,
    });
    await client.connect();
    await expect(call({ n: 1 })).resolves.toEqual({ ran: { n: 1 } });

    proxy.freeze();
    await expect(call({ n: 2 })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    proxy.thaw();
    await expect(call({ n: 3 })).resolves.toEqual({ ran: { n: 3 } });

    await drained();
    // n: 2 ran on the agent after its caller had been told it failed: a retry ran it twice.
    expect(ran).toEqual([{ n: 1 }, { n: 3 }]);
  }, 60_000);

  // Its first request to a stream: no XADD there has answered yet, Redis's clock is known from
  // its connection (TIME) all the same.
  it("never runs a client's first request that failed UNAVAILABLE either", async () => {
    const first = new RedisStreamsClient({
      redisUrl: `redis://127.0.0.1:${proxy.port}`,
      keyPrefix,
      timeoutMs: 20_000,
      commandTimeoutMs: 1000,
    });
    clients.push(first);
    await first.connect();
    const [cmd] = first.unwrap<[Redis]>();
    await cmd.ping(); // connected: its clock has been read
    ran.length = 0;

    proxy.freeze();
    await expect(lastValueFrom(first.send(PATTERN, { n: 4 }))).rejects.toMatchObject({
      code: 'UNAVAILABLE',
    });
    proxy.thaw();
    await expect(lastValueFrom(first.send(PATTERN, { n: 5 }))).resolves.toEqual({
      ran: { n: 5 },
    });
    await drained();
    expect(ran).toEqual([{ n: 5 }]);
  }, 60_000);
});
