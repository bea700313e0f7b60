import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { Writable } from 'stream';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { RedisStreamsClient, RedisStreamsServer } from './index';

const PATTERN = 'agent.logctx.execute';
const hanging: Array<() => void> = [];
let calls = 0;

@Controller()
class HangingController {
  @MessagePattern(PATTERN)
  handle(@Payload() _data: unknown): Promise<never> {
    calls++;
    return new Promise<never>((resolve) => hanging.push(resolve as () => void));
  }
}
@Module({ controllers: [HangingController] })
class HangingModule {}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !cond(); await sleep(20))
    if (Date.now() > end) throw new Error(`Timed out waiting for ${what}`);
}

/**
 * DESIGN.md §8 / docs/security.md: every log line of a turn carries its correlation id wherever
 * it is known. The agent's transport logs the requests it drops (their caller gave up, or they
 * killed every consumer that took them) outside any execution: those lines, the ones an operator
 * looks for when a turn timed out or was dead-lettered, must still carry the turn's id from the
 * request's `meta`.
 */
describe('Redis Streams server: lines about one request carry its correlation id', () => {
  const { prefix, cleanup } = createTestPrefix('loomlogctx');
  let out = '';
  const logger = new LoomLogger(
    createPinoLogger({
      service: 'agent',
      level: 'info',
      format: 'json',
      destination: new Writable({
        write(chunk, _enc, done) {
          out += chunk.toString();
          done();
        },
      }),
    }),
  );
  const lines = () =>
    out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  let apps: INestMicroservice[] = [];
  let clients: RedisStreamsClient[] = [];
  let testNo = 0;
  let keyPrefix = prefix;

  async function startServer(name: string, opts: Record<string, unknown> = {}) {
    const strategy = new RedisStreamsServer({
      redisUrl: TEST_REDIS_URL,
      keyPrefix,
      consumerName: `${name}-${process.pid}`,
      blockMs: 200,
      ...opts,
    });
    const app = await NestFactory.createMicroservice(HangingModule, { strategy, logger });
    await app.listen();
    apps.push(app);
    return app;
  }

  async function startClient(timeoutMs: number) {
    const client = new RedisStreamsClient({ redisUrl: TEST_REDIS_URL, keyPrefix, timeoutMs });
    await client.connect();
    clients.push(client);
    return client;
  }

  beforeEach(() => {
    keyPrefix = `${prefix}t${++testNo}:`;
    calls = 0;
  });
  afterEach(async () => {
    hanging.splice(0).forEach((resolve) => resolve());
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(apps.map((a) => a.close()));
    apps = [];
    clients = [];
  });
  afterAll(() => cleanup());

  it('a request skipped because its caller stopped waiting', async () => {
    const correlationId = `skip-${Date.now()}`;
    const client = await startClient(300);
    await expect(
      lastValueFrom(client.send(PATTERN, { meta: { correlationId }, work: 1 })),
    ).rejects.toMatchObject({ code: 'TIMEOUT' });
    await startServer('late');
    await waitFor('the skip to be logged', () =>
      lines().some((l) => /^Skipping request/.test(String(l.msg))),
    );
    expect(calls).toBe(0);
    expect(lines().find((l) => /^Skipping request/.test(String(l.msg)))).toMatchObject({
      correlationId,
    });
  });

  // The handler ran and answered, but its reply could not be written (here: the reply stream's
  // key holds a value of another type, as a Redis write refused for any reason): the entry stays
  // pending, and this line is all that tells of it.
  it('a request whose reply could not be written', async () => {
    const correlationId = `unwritten-${Date.now()}`;
    const client = await startClient(20_000);
    const reply = lastValueFrom(client.send(PATTERN, { meta: { correlationId }, work: 1 }));
    reply.catch(() => undefined);
    await startServer('S1');
    await waitFor('the handler to take the request', () => calls === 1);
    const redis = new Redis(TEST_REDIS_URL);
    try {
      await redis.del(client.replyKey);
      await redis.set(client.replyKey, 'not a stream', 'PX', 60_000);
    } finally {
      redis.disconnect();
    }
    hanging.splice(0).forEach((resolve) => resolve());
    await waitFor('the failed write to be logged', () =>
      lines().some((l) => /^Entry .* WRONGTYPE/.test(String(l.msg))),
    );
    expect(lines().find((l) => /^Entry .* WRONGTYPE/.test(String(l.msg)))).toMatchObject({
      level: 'error',
      correlationId,
    });
  });

  it('a request dead-lettered after it killed every consumer', async () => {
    const correlationId = `dead-${Date.now()}`;
    const opts = { claimIdleMs: 500, maxDeliveries: 1 };
    const client = await startClient(20_000);
    const reply = lastValueFrom(client.send(PATTERN, { meta: { correlationId }, poison: true }));
    reply.catch(() => undefined);
    const first = await startServer('S1', opts);
    await waitFor('S1 to take the request', () => calls === 1);
    await first.close(); // the consumer "crashes" while its handler hangs
    await startServer('S2', opts);
    await expect(reply).rejects.toMatchObject({ code: 'DEAD_LETTERED' });
    expect(lines().find((l) => /^Dead-lettering entry/.test(String(l.msg)))).toMatchObject({
      correlationId,
    });
  });
});
