import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { FreezableTcpProxy, PrivateRedisServer } from '@loom/testing';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsClientOptions, RedisStreamsServer } from './index';
import { RedisStreamsOptions } from './redis-streams.options';

const PATTERN = 'agent.echo.execute';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

@Controller()
class EchoController {
  @MessagePattern(PATTERN)
  handle(@Payload() data: unknown): unknown {
    return { echo: data };
  }
}
@Module({ controllers: [EchoController] })
class EchoModule {}

/**
 * A Redis host that vanishes without closing TCP (cable pulled, VM frozen: packets dropped, no
 * reset) leaves the command connections waiting on a socket the kernel gives up on only after
 * its retransmission time-out (~15 min). A frozen proxy in front of a private redis-server
 * stands for that host: nothing moves either way, nothing is closed.
 */
describe('Redis Streams transport: a Redis host lost without a reset (private redis-server)', () => {
  let redis: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  let apps: INestMicroservice[] = [];
  let clients: RedisStreamsClient[] = [];
  let testNo = 0;
  let keyPrefix = '';

  beforeAll(async () => {
    redis = await PrivateRedisServer.start();
  });
  afterAll(async () => {
    await redis.kill();
  });

  beforeEach(async () => {
    keyPrefix = `loomlive${++testNo}:`;
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: redis.port });
  });
  afterEach(async () => {
    // A connection still stranded would hold a close up: each gets a few seconds.
    proxy.thaw();
    const closing = [...clients.map((c) => c.close()), ...apps.map((a) => a.close())];
    await Promise.race([Promise.allSettled(closing), sleep(5000)]);
    await proxy.close();
    apps = [];
    clients = [];
  });

  const viaProxy = (): string => `redis://127.0.0.1:${proxy.port}`;

  async function startServer(opts: Partial<RedisStreamsOptions> = {}): Promise<void> {
    const strategy = new RedisStreamsServer({
      redisUrl: redis.url,
      keyPrefix,
      blockMs: 200,
      ...opts,
    });
    const app = await NestFactory.createMicroservice(EchoModule, { strategy, logger: false });
    await app.listen();
    apps.push(app);
  }

  async function startClient(opts: Partial<RedisStreamsClientOptions> = {}) {
    const client = new RedisStreamsClient({ redisUrl: redis.url, keyPrefix, ...opts });
    await client.connect();
    clients.push(client);
    return client;
  }

  const call = (client: RedisStreamsClient, data: unknown): Promise<any> =>
    lastValueFrom(client.send(PATTERN, data));

  /** What `work` settled with within `ms`, or `pending`. */
  async function within(ms: number, work: Promise<unknown>): Promise<unknown> {
    work.catch(() => undefined);
    return Promise.race([
      work.then(
        (value) => ({ resolved: value }),
        (err: unknown) => ({ rejected: err }),
      ),
      sleep(ms).then(() => 'pending'),
    ]);
  }

  it('a call fails UNAVAILABLE within the command time-out while Redis is unreachable, and calls answer once it is back', async () => {
    await startServer();
    const client = await startClient({
      redisUrl: viaProxy(),
      timeoutMs: 20_000,
      commandTimeoutMs: 1000,
    });
    await expect(call(client, { n: 1 })).resolves.toEqual({ echo: { n: 1 } });

    proxy.freeze();
    // Its XADD waited on the dead socket: the call hung for its whole AGENT_TIMEOUT_MS and then
    // failed TIMEOUT ("no live instance"), and so did every call after it.
    expect(await within(4000, call(client, { n: 2 }))).toEqual({
      rejected: expect.objectContaining({ code: 'UNAVAILABLE' }),
    });

    proxy.thaw();
    await expect(call(client, { n: 3 })).resolves.toEqual({ echo: { n: 3 } });
  }, 30_000);

  it("a client's calls answer again once its connections are stranded on a host that is gone (the address leads to a new one)", async () => {
    await startServer();
    const client = await startClient({
      redisUrl: viaProxy(),
      timeoutMs: 10_000,
      commandTimeoutMs: 1000,
    });
    await expect(call(client, { n: 1 })).resolves.toEqual({ echo: { n: 1 } });

    // Its command connection stayed on the old host until the kernel gave up: every call
    // failed TIMEOUT for about 15 minutes.
    proxy.strand();
    let answered: unknown;
    for (let i = 0; i < 3 && !answered; i++)
      answered = await call(client, { n: 2 }).catch(() => undefined);
    expect(answered).toEqual({ echo: { n: 2 } });
  }, 60_000);

  it('an agent answers again once its connections are stranded on a host that is gone (the address leads to a new one)', async () => {
    await startServer({ redisUrl: viaProxy(), commandTimeoutMs: 1000, claimIdleMs: 1000 });
    const client = await startClient({ timeoutMs: 15_000 });
    await expect(call(client, { n: 1 })).resolves.toEqual({ echo: { n: 1 } });
    await sleep(300); // its reader waits in a blocked XREADGROUP

    // Its reader reconnects after BLOCK + 5 s and takes the request, but its reply went out on
    // the command connection left on the old host: never written, the call failed TIMEOUT.
    proxy.strand();
    await expect(call(client, { n: 2 })).resolves.toEqual({ echo: { n: 2 } });
  }, 30_000);
});
