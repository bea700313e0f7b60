import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer, requestStreamKey } from './index';

const PATTERN = 'agent.clock.execute';
const SKEW_MS = 10 * 60_000;
let handled: unknown[] = [];

@Controller()
class ClockController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    handled.push(data);
    return { echo: data };
  }
}
@Module({ controllers: [ClockController] })
class ClockModule {}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * A request's deadline and start-by are written by the caller's host and checked by the
 * agent's: an agent whose clock is minutes off must neither skip a live request nor run one
 * its caller gave up on (real Redis; the agent's Date.now() skewed).
 */
describe('Redis Streams transport: deadlines across skewed clocks', () => {
  const { prefix, cleanup } = createTestPrefix('loomrpcclock');
  const redis = new Redis(TEST_REDIS_URL);
  const realNow = Date.now;
  let keyPrefix = prefix;
  let testNo = 0;
  let apps: INestMicroservice[] = [];
  let clients: RedisStreamsClient[] = [];

  async function startAgent(): Promise<void> {
    const strategy = new RedisStreamsServer({
      redisUrl: TEST_REDIS_URL,
      keyPrefix,
      consumerName: `clock-${process.pid}`,
      blockMs: 200,
    });
    const app = await NestFactory.createMicroservice(ClockModule, { strategy, logger: false });
    await app.listen();
    apps.push(app);
  }

  beforeEach(() => {
    keyPrefix = `${prefix}t${++testNo}:`;
    handled = [];
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    clients = [];
  });
  afterAll(async () => {
    await cleanup();
    redis.disconnect();
  });

  it('an agent whose clock runs ahead still answers a live request', async () => {
    const client = new RedisStreamsClient({
      redisUrl: TEST_REDIS_URL,
      keyPrefix,
      timeoutMs: 30_000,
    });
    await client.connect();
    clients.push(client);
    const answer = lastValueFrom(client.send(PATTERN, { q: 1 }));
    await sleep(100); // sent, on the caller's (correct) clock
    // The agent's host is ten minutes ahead.
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + SKEW_MS);
    await startAgent();
    await expect(answer).resolves.toEqual({ echo: { q: 1 } });
  });

  it('an agent whose clock runs behind skips a request its caller gave up on', async () => {
    const key = requestStreamKey(keyPrefix, PATTERN);
    // Written by a caller whose deadline passed a second ago (on the correct clock).
    await redis.xadd(key, '*', 'id', 'r1', 'deadline', String(realNow() - 1000), 'data', '{"q":2}');
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() - SKEW_MS);
    await startAgent();
    // Finished (run or skipped): the entry is acknowledged and deleted.
    for (let i = 0; i < 250 && (await redis.xlen(key)) > 0; i++) await sleep(20);
    expect(await redis.xlen(key)).toBe(0);
    expect(handled).toEqual([]);
  });
});
