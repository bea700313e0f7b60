import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern } from '@nestjs/microservices';
import { ProxiedRedis, startProxiedRedis } from '@loom/testing';
import { Observable } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from './index';

const PATTERN = 'agent.resendreply.execute';
let started: () => void = () => undefined;
let gate: Promise<void> = Promise.resolve();

@Controller()
class StreamingController {
  /** Answers two values, the first once the test opens the gate. */
  @MessagePattern(PATTERN)
  handle(): Observable<number> {
    return new Observable<number>((subscriber) => {
      started();
      void gate.then(() => {
        subscriber.next(1);
        setTimeout(() => (subscriber.next(2), subscriber.complete()), 300);
      });
    });
  }
}
@Module({ controllers: [StreamingController] })
class StreamingModule {}

/**
 * A handler that answers several values (an Observable) writes each as a reply of its own: one
 * whose XADD ran but whose answer was lost to a reset of the agent's connection is sent again by
 * ioredis once reconnected, and its caller received that value twice.
 */
describe('Redis Streams transport: a streamed reply sent again after a reset reaches its caller once (private redis-server)', () => {
  let rig: ProxiedRedis;
  let app: INestMicroservice;
  let client: RedisStreamsClient;
  const keyPrefix = 'loomresendrep:';

  beforeAll(async () => {
    rig = await startProxiedRedis();
    const strategy = new RedisStreamsServer({
      redisUrl: rig.proxiedUrl,
      keyPrefix,
      blockMs: 200,
      commandTimeoutMs: 4000,
    });
    app = await NestFactory.createMicroservice(StreamingModule, { strategy, logger: false });
    await app.listen();
    client = new RedisStreamsClient({ redisUrl: rig.redis.url, keyPrefix, timeoutMs: 20_000 });
    await client.connect();
  });
  afterAll(() => rig?.stop(client?.close(), app?.close()));

  it('delivers each value of a streamed answer once when its reply is sent again', async () => {
    let open: () => void = () => undefined;
    gate = new Promise<void>((resolve) => (open = resolve));
    const running = new Promise<void>((resolve) => (started = resolve));
    const answers: unknown[] = [];
    const done = new Promise<void>((resolve) =>
      client.send(PATTERN, {}).subscribe({
        next: (value) => answers.push(value),
        error: (err) => (answers.push(err), resolve()),
        complete: resolve,
      }),
    );
    await running;
    rig.proxy.resetOnNextAnswer(); // the next answer on the agent's connections: the first reply's
    open();
    await done;
    expect(answers).toEqual([1, 2]);
  }, 60_000);
});
