import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { PrivateRedisServer, sleep } from '@loom/testing';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from './index';

const PATTERN = 'agent.replyrestart.execute';
const AHEAD_MS = 10 * 60_000;

@Controller()
class EchoController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    return { echo: data };
  }
}
@Module({ controllers: [EchoController] })
class EchoModule {}

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20))
    if (await check().catch(() => false)) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * A client reads its reply stream from the last entry id it read. The Redis holding it may come
 * back empty (a restart without persistence) on a host whose clock runs behind the old one's:
 * the replies then get ids below that last id, and an XREAD from it never returned them (every
 * call failed TIMEOUT for as long as the clocks differ). The old host's clock ahead is played
 * here by an entry written with an explicit id ten minutes ahead, read by the client.
 */
describe('Redis Streams transport: the reply reader across a Redis restarted empty, its clock behind', () => {
  let server: PrivateRedisServer;
  let redis: Redis;
  let app: INestMicroservice | undefined;
  let client: RedisStreamsClient | undefined;
  const keyPrefix = 'loomreplyrestart:';

  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    redis = new Redis(server.url);
    redis.on('error', () => undefined);
  });
  afterAll(async () => {
    await Promise.allSettled([client?.close(), app?.close()]);
    redis.disconnect();
    await server.kill();
  });

  it('reads the replies written after the restart, whose ids are below the last one it read', async () => {
    const strategy = new RedisStreamsServer({ redisUrl: server.url, keyPrefix, blockMs: 500 });
    app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
    client = new RedisStreamsClient({ redisUrl: server.url, keyPrefix, timeoutMs: 15_000 });
    await client.connect();
    await expect(lastValueFrom(client.send(PATTERN, { n: 0 }))).resolves.toEqual({
      echo: { n: 0 },
    });
    // Written on the old host's clock, ten minutes ahead: the reader's last id from now on.
    await redis.xadd(client.replyKey, `${Date.now() + AHEAD_MS}-0`, 'id', 'not-a-call');
    await waitFor(
      'the entry read (and deleted)',
      async () => (await redis.xlen(client!.replyKey)) === 0,
    );

    await server.kill();
    await server.restart(); // empty, its clock (the real one) ten minutes behind that id

    await expect(lastValueFrom(client.send(PATTERN, { n: 1 }))).resolves.toEqual({
      echo: { n: 1 },
    });
  }, 60_000);
});
