import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { PrivateRedisServer, sleep } from '@loom/testing';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { ConsumerGroup } from './redis-streams.group';
import { CONSUMER_GROUP } from './redis-streams.options';
import {
  deadLetterStreamKey,
  RedisStreamsClient,
  RedisStreamsServer,
  requestStreamKey,
} from './index';

const PATTERN = 'agent.lookback.execute';
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

async function waitFor(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20))
    if (await check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * What an agent's look-back (after its reader connected again) finds pending on its consumer
 * was delivered before, as many times as Redis counted: a request delivered past maxDeliveries
 * is dead-lettered there as the reclaim loop would, not run again as a first delivery.
 */
describe('Redis Streams transport: the look-back at our pending entries (private redis-server)', () => {
  let server: PrivateRedisServer;
  let redis: Redis;
  let app: INestMicroservice | undefined;
  let client: RedisStreamsClient | undefined;
  const keyPrefix = 'loomlookback:';
  const consumer = 'agent-lookback';
  const requestKey = requestStreamKey(keyPrefix, PATTERN);

  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    redis = new Redis(server.url);
  });
  afterAll(async () => {
    await Promise.allSettled([client?.close(), app?.close()]);
    redis.disconnect();
    await server.kill();
  });

  /** The agent's blocked reader, as the server lists it. */
  const readerLine = async (): Promise<string | undefined> =>
    ((await redis.client('LIST')) as string)
      .split('\n')
      .find((l) => l.includes(` name=loom-rpc-reader-${consumer} `) && l.includes(' flags=b '));

  it('dead-letters a request delivered more than maxDeliveries times, without running it', async () => {
    client = new RedisStreamsClient({ redisUrl: server.url, keyPrefix, timeoutMs: 20_000 });
    await client.connect();
    const reply = lastValueFrom(client.send(PATTERN, { job: 'poison' }));
    reply.catch(() => undefined);
    await waitFor('the request queued', async () => (await redis.xlen(requestKey)) === 1);
    // Delivered to this agent's consumer 7 times already (reclaimed, left unrun for want of a
    // slot, its instance restarted…): pending on it, not running anywhere.
    await new ConsumerGroup(consumer, new Map([[requestKey, PATTERN]])).create(redis);
    const [[, [[id]]]] = (await redis.call(
      ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, consumer, 'COUNT', 1, 'STREAMS', requestKey, '>'],
    )) as [string, [string, unknown][]][];
    await redis.call('XCLAIM', requestKey, CONSUMER_GROUP, consumer, 0, id, 'RETRYCOUNT', 7);

    const strategy = new RedisStreamsServer({
      redisUrl: server.url,
      keyPrefix,
      consumerName: consumer,
      blockMs: 20_000,
      claimIdleMs: 120_000,
      maxDeliveries: 5,
    });
    app = await NestFactory.createMicroservice(CountingModule, { strategy, logger: false });
    await app.listen();
    // Its reader loses its connection while blocked, connects again, and looks back.
    await waitFor('the reader to block', async () => (await readerLine()) !== undefined);
    const readerId = /(?:^| )id=(\d+)/.exec((await readerLine())!)![1];
    await redis.call('CLIENT', 'KILL', 'ID', readerId);

    await expect(reply).rejects.toMatchObject({ code: 'DEAD_LETTERED' });
    const [[, fields]] = await redis.xrange(deadLetterStreamKey(keyPrefix, PATTERN), '-', '+');
    expect(fields.join(' ')).toContain('delivered 7 times (max 5)');
    expect(ran).toEqual([]);
  }, 30_000);
});
