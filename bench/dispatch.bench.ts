/**
 * A no-op agent hop over Loom's dispatch (RedisStreamsClient → RedisStreamsServer, a no-op
 * @MessagePattern handler in an in-process Nest microservice) beside the stock Nest Redis
 * transport (Transport.REDIS ClientProxy → microservice, pub/sub) on the same Redis, in one run:
 * sequential latency (blocks of calls alternating between the two, so drift hits both alike),
 * then throughput with 64 concurrent callers. Uses its own key prefix / channel names on
 * TEST_REDIS_URL and removes its keys after.
 */
import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxy,
  ClientProxyFactory,
  MessagePattern,
  MicroserviceOptions,
  Payload,
  Transport,
} from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { RedisStreamsClient, RedisStreamsServer } from '@loom/agent-kit/transport';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { onInterrupt } from './interrupt';
import { ms, summarize, Summary, table } from './stats';

const SEQUENTIAL = 2000;
const WARMUP = 200;
const BLOCK = 200;
const CALLERS = 64;
const CALLS_PER_CALLER = 100;
const PAYLOAD = { assignment: 'x'.repeat(300), meta: { correlationId: 'r_bench' }, language: 'en' };

export interface Transports {
  stock: { call(): Promise<unknown>; close(): Promise<void> };
  loom: { call(): Promise<unknown>; close(): Promise<void> };
}

/** No-op handler on `pattern`: returns a small result, like an agent's, at once. */
function noopModule(pattern: string): new () => object {
  @Controller()
  class NoopController {
    @MessagePattern(pattern)
    handle(@Payload() data: { meta: { correlationId: string } }): unknown {
      return { ok: true, correlationId: data.meta.correlationId };
    }
  }
  @Module({ controllers: [NoopController] })
  class NoopModule {}
  return NoopModule;
}

async function microservice(
  pattern: string,
  options: MicroserviceOptions,
): Promise<INestMicroservice> {
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(noopModule(pattern), {
    ...options,
    logger: false,
  });
  await app.listen();
  return app;
}

/** Both transports, each a server (in-process microservice) and a connected client. */
export async function openTransports(
  keyPrefix: string,
  redisUrl = TEST_REDIS_URL,
): Promise<Transports> {
  const url = new URL(redisUrl);
  const redisOptions = { host: url.hostname, port: Number(url.port || 6379) };
  const stockPattern = `${keyPrefix}agent.noop.execute`;
  const stockServer = await microservice(stockPattern, {
    transport: Transport.REDIS,
    options: redisOptions,
  });
  const stockClient: ClientProxy = ClientProxyFactory.create({
    transport: Transport.REDIS,
    options: redisOptions,
  });
  await stockClient.connect();

  const pattern = 'agent.noop.execute';
  const loomServer = await microservice(pattern, {
    strategy: new RedisStreamsServer({ redisUrl, keyPrefix }),
  });
  const loomClient = new RedisStreamsClient({ redisUrl, keyPrefix });
  await loomClient.connect();
  return {
    stock: {
      call: () => lastValueFrom(stockClient.send(stockPattern, PAYLOAD)),
      close: async () => {
        await stockClient.close();
        await stockServer.close();
      },
    },
    loom: {
      call: () => lastValueFrom(loomClient.send(pattern, PAYLOAD)),
      close: async () => {
        await loomClient.close();
        await loomServer.close();
      },
    },
  };
}

/** Sequential latency of both, alternating blocks of `BLOCK` calls. */
export async function sequential(
  t: Transports,
  count = SEQUENTIAL,
): Promise<{ stock: Summary; loom: Summary }> {
  for (let i = 0; i < WARMUP; i++) {
    await t.stock.call();
    await t.loom.call();
  }
  const samples = { stock: [] as number[], loom: [] as number[] };
  while (samples.loom.length < count) {
    for (const name of ['stock', 'loom'] as const) {
      for (let i = 0; i < BLOCK; i++) {
        const t0 = performance.now();
        await t[name].call();
        samples[name].push(performance.now() - t0);
      }
    }
  }
  return { stock: summarize(samples.stock), loom: summarize(samples.loom) };
}

/** Requests per second with `callers` concurrent callers, each making `perCaller` calls in a row. */
export async function throughput(
  call: () => Promise<unknown>,
  callers = CALLERS,
  perCaller = CALLS_PER_CALLER,
): Promise<number> {
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      for (let i = 0; i < perCaller; i++) await call();
    }),
  );
  return (callers * perCaller) / ((performance.now() - t0) / 1000);
}

export async function run(): Promise<void> {
  const prefix = createTestPrefix('loombenchrpc');
  const removeKeys = onInterrupt(() => prefix.cleanup());
  const t = await openTransports(prefix.prefix);
  try {
    const lat = await sequential(t);
    // Alternate twice so neither side gets only the cold or the warm half.
    const rps = { stock: [] as number[], loom: [] as number[] };
    for (let round = 0; round < 2; round++) {
      rps.stock.push(await throughput(t.stock.call));
      rps.loom.push(await throughput(t.loom.call));
    }
    const best = (xs: number[]) => Math.max(...xs);
    print(lat, { stock: best(rps.stock), loom: best(rps.loom) });
  } finally {
    await t.loom.close();
    await t.stock.close();
    await removeKeys();
  }
}

function print(lat: { stock: Summary; loom: Summary }, rps: { stock: number; loom: number }) {
  console.log(
    `\ndispatch: a no-op agent hop, ms (Redis ${new URL(TEST_REDIS_URL).host}; ` +
      `${lat.loom.n} sequential calls each after ${WARMUP} warm-up, alternating blocks of ${BLOCK}; ` +
      `throughput: ${CALLERS} concurrent callers × ${CALLS_PER_CALLER} calls, best of 2)`,
  );
  const row = (name: string, s: Summary, r: number) => [
    name,
    ms(s.p50),
    ms(s.p99),
    ms(s.mean),
    ms(s.max),
    String(s.n),
    r.toFixed(0),
  ];
  console.log(
    table(
      ['transport', 'p50', 'p99', 'mean', 'max', 'n', 'req/s @64'],
      [
        row('stock Nest Redis (pub/sub)', lat.stock, rps.stock),
        row('Loom Redis Streams', lat.loom, rps.loom),
      ],
    ),
  );
  const p50 = lat.loom.p50 / lat.stock.p50;
  const p99 = lat.loom.p99 / lat.stock.p99;
  const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
  console.log(
    `Loom / stock: p50 ${p50.toFixed(2)}× (target <= 2: ${verdict(p50 <= 2)}), ` +
      `p99 ${p99.toFixed(2)}× (target <= 3: ${verdict(p99 <= 3)}), ` +
      `throughput ${(rps.loom / rps.stock).toFixed(2)}× of stock`,
  );
}
