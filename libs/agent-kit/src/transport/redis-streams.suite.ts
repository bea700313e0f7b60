import { Controller, INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { FreezableTcpProxy, PrivateRedisServer, createTestPrefix, freePort } from '@loom/testing';
import { RedisClient, RedisTarget } from '@loom/session';
import Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import {
  CONSUMER_GROUP,
  HandlerCancelled,
  RedisStreamsClient,
  RedisStreamsClientOptions,
  RedisStreamsContext,
  RedisStreamsOptions,
  RedisStreamsServer,
  deadLetterStreamKey,
  requestStreamKey,
} from './index';
import { ConsumerGroup } from './redis-streams.group';

const PATTERN = 'agent.echo.execute';
/** A second pattern of the same server: its stream sits in another slot of a cluster. */
const HEALTH = 'agent.echo.health';

type Behavior = (data: any, ctx: RedisStreamsContext, server: string) => unknown;
interface Call {
  server: string;
  data: any;
  delivery: number;
}

let behavior: Behavior = (data, ctx, server) => ({ echo: data, server });
let healthBehavior = (server: string): unknown => ({ ok: server });
let calls: Call[] = [];
const hanging: (() => void)[] = [];
/** A handler that never returns (until the suite ends). */
const hang = (): Promise<never> => new Promise<never>((resolve) => hanging.push(resolve as any));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A slow Redis for the reclaim loop: XAUTOCLAIM runs (and claims) at once, but an answer that
 * claimed something reaches the server only `ms` later. `claimed` says one has been sent.
 */
function delayClaimAnswers(ms: number): { claimed: boolean; restore: () => void } {
  const original = ConsumerGroup.prototype.claimIdle;
  const state = { claimed: false, restore: () => spy.mockRestore() };
  const spy = jest.spyOn(ConsumerGroup.prototype, 'claimIdle').mockImplementation(async function (
    this: ConsumerGroup,
    ...args: Parameters<ConsumerGroup['claimIdle']>
  ) {
    const entries = await original.apply(this, args);
    if (entries.length === 0) return entries;
    state.claimed = true;
    await sleep(ms);
    return entries;
  });
  return state;
}

/** Polls `check` every 20 ms for up to 5 s; fails the test if it never holds. */
async function waitUntil(check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 5000; Date.now() < deadline; await sleep(20))
    if (await check()) return;
  throw new Error('condition not met within 5 s');
}

function echoModule(server: string): new () => object {
  @Controller()
  class EchoController {
    @MessagePattern(PATTERN)
    handle(@Payload() data: any, @Ctx() ctx: RedisStreamsContext): unknown {
      calls.push({ server, data, delivery: ctx.getDeliveryCount() });
      return behavior(data, ctx, server);
    }

    @MessagePattern(HEALTH)
    health(): unknown {
      return healthBehavior(server);
    }
  }
  @Module({ controllers: [EchoController] })
  class EchoModule {}
  return EchoModule;
}

async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 8000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`Timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Where a run of the suite finds Redis: standalone or a cluster of its own. */
export interface TransportBackend {
  name: 'standalone' | 'cluster';
  /** Connects (starting the cluster, if need be): the target, and a client to look with. */
  open(): Promise<{ target: RedisTarget; redis: RedisClient; close: () => Promise<void> }>;
  /** A cluster's: kills and restarts the master holding `key` (data lost, slots kept). */
  restartMasterOf?(key: string): Promise<void>;
  /** A cluster's: the port of the master that holds `key`. */
  masterPortOf?(key: string): Promise<number>;
}

/**
 * The transport's suite on one backend. A cluster runs what dispatch promises (one consumer,
 * at least once, reclaim, dead letter, replies to the asking client, progress); what only a
 * server of one's own can show (connections killed, Redis gone), and the slow cases of the
 * server's and client's own timing (drains, deadlines), which send nothing a cluster treats
 * otherwise, run standalone only.
 */
export function runTransportSuite(backend: TransportBackend): void {
  const standalone = backend.name === 'standalone';
  /** A test declared on standalone Redis only. */
  const itStandalone: jest.It = standalone ? it : ((() => undefined) as unknown as jest.It);
  /** A test declared on a cluster only. */
  const itCluster: jest.It = standalone ? ((() => undefined) as unknown as jest.It) : it;
  describe(`Redis Streams transport (${backend.name})`, () => {
    const { prefix, cleanup } = createTestPrefix('loomrpc');
    let redis: RedisClient;
    let target: RedisTarget;
    let closeBackend: () => Promise<void>;
    let keyPrefix = prefix;
    let testNo = 0;
    let apps: INestMicroservice[] = [];
    let clients: RedisStreamsClient[] = [];
    let proxies: FreezableTcpProxy[] = [];
    const requestKey = (): string => requestStreamKey(keyPrefix, PATTERN);

    async function startServer(name: string, opts: Partial<RedisStreamsOptions> = {}) {
      const strategy = new RedisStreamsServer({
        redisUrl: target.url,
        redisClusterNodes: target.clusterNodes ? [...target.clusterNodes] : undefined,
        redisClusterNatMap: target.natMap,
        keyPrefix,
        consumerName: `${name}-${process.pid}`,
        blockMs: 200,
        ...opts,
      });
      const app = await NestFactory.createMicroservice(echoModule(name), {
        strategy,
        logger: false,
      });
      await app.listen();
      apps.push(app);
      return app;
    }

    async function startClient(opts: Partial<RedisStreamsClientOptions> = {}) {
      const client = new RedisStreamsClient({
        redisUrl: target.url,
        redisClusterNodes: target.clusterNodes ? [...target.clusterNodes] : undefined,
        redisClusterNatMap: target.natMap,
        keyPrefix,
        ...opts,
      });
      await client.connect();
      clients.push(client);
      return client;
    }

    const call = (client: RedisStreamsClient, data: unknown): Promise<any> =>
      lastValueFrom(client.send(PATTERN, data));

    /** Entries ever added to a stream (read replies are deleted, so XLEN would not tell). */
    async function repliesAdded(key: string): Promise<number> {
      const info = (await redis.call('XINFO', 'STREAM', key)) as unknown[];
      return Number(info[info.indexOf('entries-added') + 1]);
    }

    /**
     * Waits until the request is acknowledged and deleted. On a cluster that step follows the
     * reply (two slots, two steps: see writeReply), so a caller may hear before it is done.
     */
    const acknowledged = (): Promise<void> =>
      waitFor(
        'the request acknowledged',
        async () => (await pendingCount()) === 0 && (await redis.xlen(requestKey())) === 0,
      );

    async function pendingCount(): Promise<number> {
      const [count] = (await redis.xpending(requestKey(), CONSUMER_GROUP)) as [number];
      return count;
    }

    beforeAll(async () => {
      ({ target, redis, close: closeBackend } = await backend.open());
    });

    beforeEach(() => {
      keyPrefix = `${prefix}t${++testNo}:`; // every test starts with empty streams
      behavior = (data, _ctx, server) => ({ echo: data, server });
      healthBehavior = (server) => ({ ok: server });
      calls = [];
    });

    afterEach(async () => {
      await Promise.all(clients.map((c) => c.close()));
      await Promise.all(apps.map((a) => a.close()));
      await Promise.all(proxies.map((p) => p.close()));
      apps = [];
      clients = [];
      proxies = [];
    });

    afterAll(async () => {
      hanging.splice(0).forEach((release) => release());
      if (standalone) await cleanup();
      await closeBackend();
    });

    it('round-trips a request and delivers an RpcException payload as is', async () => {
      await startServer('A');
      const client = await startClient();
      behavior = (data, ctx, server) => {
        if (data.fail) throw new RpcException({ code: 'X', message: 'nope' });
        return { echo: data, server, delivery: ctx.getDeliveryCount(), pattern: ctx.getPattern() };
      };

      await expect(call(client, { n: 1 })).resolves.toEqual({
        echo: { n: 1 },
        server: 'A',
        delivery: 1,
        pattern: PATTERN,
      });
      await expect(call(client, { fail: true })).rejects.toEqual({ code: 'X', message: 'nope' });
      expect(calls).toHaveLength(2);
      await acknowledged(); // acked and deleted
      // Replies (what agents answered) leave the reply stream once read, not with its TTL.
      await waitUntil(async () => (await redis.xlen(client.replyKey)) === 0);
    });

    it('serves every pattern of a server, each read from its own stream', async () => {
      await startServer('A');
      const client = await startClient();
      const [execute, health] = [requestKey(), requestStreamKey(keyPrefix, HEALTH)];
      if (!standalone)
        expect(await redis.cluster('KEYSLOT', execute)).not.toBe(
          await redis.cluster('KEYSLOT', health),
        );

      await expect(lastValueFrom(client.send(HEALTH, {}))).resolves.toEqual({ ok: 'A' });
      await expect(call(client, { n: 1 })).resolves.toEqual({ echo: { n: 1 }, server: 'A' });
      expect(await redis.xlen(health)).toBe(0);
      expect(await redis.xlen(execute)).toBe(0);
    });

    it('takes no more requests than it has free slots, over all its streams: the rest go to other servers', async () => {
      let finish: (() => void) | undefined;
      behavior = () => new Promise((resolve) => (finish = () => resolve({ slow: true })));
      try {
        await startServer('A', { concurrency: 1 });
        const client = await startClient({ timeoutMs: 15000 });
        const slow = call(client, { slow: true });
        await waitFor('the slow call running on A', () => calls.length === 1);
        const health = lastValueFrom(client.send(HEALTH, {}));
        const healthKey = requestStreamKey(keyPrefix, HEALTH);
        await waitFor('the health request queued', async () => (await redis.xlen(healthKey)) === 1);
        await sleep(600); // three of A's blocking reads (blockMs 200): it would have taken it by now
        // A's one slot is busy: the request is nobody's yet, for another server to take.
        expect(await redis.xpending(healthKey, CONSUMER_GROUP)).toEqual([0, null, null, null]);

        await startServer('B');
        await expect(health).resolves.toEqual({ ok: 'B' });
        finish?.();
        await expect(slow).resolves.toEqual({ slow: true });
      } finally {
        finish?.();
      }
    });

    it('a request its blocked read brings once a reclaim filled its slots goes to another server', async () => {
      let finish: (() => void) | undefined;
      behavior = (data, _ctx, server) =>
        data.job === 'orphan'
          ? new Promise((resolve) => (finish = () => resolve({ done: true })))
          : { echo: data, server };
      try {
        // An instance died holding a request: it sits pending on its consumer, idle.
        const client = await startClient({ timeoutMs: 15000 });
        const orphan = call(client, { job: 'orphan' });
        orphan.catch(() => undefined);
        await waitFor('the orphan queued', async () => (await redis.xlen(requestKey())) === 1);
        const streams = new Map([[requestKey(), PATTERN]]);
        await new ConsumerGroup('dead', streams).create(redis);
        const [[, [[orphanId]]]] = (await redis.call(
          ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, 'dead', 'COUNT', 1],
          ...['STREAMS', requestKey(), '>'],
        )) as [string, [string, unknown][]][];
        await redis.call(
          'XCLAIM',
          requestKey(),
          CONSUMER_GROUP,
          'dead',
          0,
          orphanId,
          'IDLE',
          60_000,
        );

        // A (one slot) blocks in a long XREADGROUP for one entry while its reclaim loop takes
        // the orphan into that slot: the next request reaches A's read all the same.
        await startServer('A', { concurrency: 1, claimIdleMs: 400, blockMs: 8000 });
        await waitFor('A to run the orphan', () => calls.length === 1);
        const next = call(await startClient({ timeoutMs: 5000 }), { job: 'next' });
        await sleep(300);
        await startServer('B', { concurrency: 1 });

        // It used to wait in A's local backlog behind the orphan, unseen by B, kept alive by
        // A's reclaim loop, until its caller gave up.
        await expect(next).resolves.toEqual({ echo: { job: 'next' }, server: 'B' });
        finish?.();
        await expect(orphan).resolves.toEqual({ done: true });
      } finally {
        finish?.();
      }
    });

    it('a request its reclaim brings once a read filled its slots is left for another server', async () => {
      let finish: (() => void) | undefined;
      behavior = (data, _ctx, server) =>
        data.job === 'hog'
          ? new Promise((resolve) => (finish = () => resolve({ done: true })))
          : { echo: data, server };
      // XAUTOCLAIM runs at once, but its answer reaches the server only once the hog runs.
      const original = ConsumerGroup.prototype.claimIdle;
      const state = { claimed: false, answered: false };
      const spy = jest
        .spyOn(ConsumerGroup.prototype, 'claimIdle')
        .mockImplementation(async function (
          this: ConsumerGroup,
          ...args: Parameters<ConsumerGroup['claimIdle']>
        ) {
          const entries = await original.apply(this, args);
          if (entries.length === 0 || state.claimed) return entries;
          state.claimed = true;
          await waitFor('the hog to run', () => calls.some((c) => c.data.job === 'hog'));
          state.answered = true;
          return entries;
        });
      try {
        // An instance died holding a request: it sits pending on its consumer, idle.
        const client = await startClient({ timeoutMs: 15000 });
        const orphan = call(client, { job: 'orphan' });
        await waitFor('the orphan queued', async () => (await redis.xlen(requestKey())) === 1);
        const streams = new Map([[requestKey(), PATTERN]]);
        await new ConsumerGroup('dead', streams).create(redis);
        const [[, [[orphanId]]]] = (await redis.call(
          ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, 'dead', 'COUNT', 1],
          ...['STREAMS', requestKey(), '>'],
        )) as [string, [string, unknown][]][];
        await redis.call(
          'XCLAIM',
          requestKey(),
          CONSUMER_GROUP,
          'dead',
          0,
          orphanId,
          'IDLE',
          60_000,
        );

        // A (one slot) takes the orphan over while its slot is free, but hears so only after its
        // read has filled the slot with a request that runs on.
        await startServer('A', { concurrency: 1, claimIdleMs: 2000 });
        await waitFor('A to claim the orphan', () => state.claimed);
        const hog = call(client, { job: 'hog' });
        hog.catch(() => undefined);
        await waitFor('A to hear of its claim', () => state.answered);
        await startServer('B', { concurrency: 1, claimIdleMs: 2000 });

        // It used to wait in A's local backlog behind the hog, kept alive by A's reclaim loop so
        // that B never took it, until its caller gave up.
        await expect(orphan).resolves.toEqual({ echo: { job: 'orphan' }, server: 'B' });
        finish?.();
        await expect(hog).resolves.toEqual({ done: true });
      } finally {
        spy.mockRestore();
        finish?.();
      }
    });

    itCluster(
      'keeps serving after the masters of its request stream and reply stream restart',
      async () => {
        await startServer('A');
        const client = await startClient({ timeoutMs: 20000 });
        await expect(call(client, { n: 1 })).resolves.toEqual({ echo: { n: 1 }, server: 'A' });

        await backend.restartMasterOf!(requestKey()); // its stream and consumer group are gone
        await expect(call(client, { n: 2 })).resolves.toEqual({ echo: { n: 2 }, server: 'A' });
        await backend.restartMasterOf!(client.replyKey);
        await expect(call(client, { n: 3 })).resolves.toEqual({ echo: { n: 3 }, server: 'A' });
      },
    );

    /**
     * A client whose reply stream sits on another master than the request stream, and a handler
     * that, on its first call, makes the master holding `busyOf` ('request' or 'reply') answer
     * BUSY (a script that never ends, until `release`) and runs 200 ms more.
     */
    async function withBusyMaster(busyOf: 'request' | 'reply') {
      let client = await startClient({ timeoutMs: 15000 });
      const requestPort = await backend.masterPortOf!(requestKey());
      while ((await backend.masterPortOf!(client.replyKey)) === requestPort) {
        await client.close();
        clients = clients.filter((c) => c !== client);
        client = await startClient({ timeoutMs: 15000 });
      }
      const port =
        busyOf === 'request' ? requestPort : await backend.masterPortOf!(client.replyKey);
      const node = new Redis(port, '127.0.0.1');
      node.on('error', () => undefined);
      const blocker = node.duplicate();
      blocker.on('error', () => undefined);
      await node.config('SET', 'busy-reply-threshold', '50');
      let busy: Promise<unknown> | undefined;
      behavior = async (data, _ctx, server) => {
        if (!busy) {
          busy = blocker.eval('while true do end', 0).catch(() => undefined);
          await sleep(200);
        }
        return { echo: data, server };
      };
      return {
        client,
        /** Ends the script: the master answers again. */
        release: async () => {
          await node.call('SCRIPT', 'KILL');
          await busy;
        },
        close: async () => {
          await node.call('SCRIPT', 'KILL').catch(() => undefined);
          await node.config('SET', 'busy-reply-threshold', '5000');
          blocker.disconnect();
          node.disconnect();
        },
      };
    }

    itCluster(
      'runs a request once when its acknowledgement fails a moment after the reply went out',
      async () => {
        // The request's master is busy: the reply (another master) goes out, XACK + XDEL are refused.
        const busy = await withBusyMaster('request');
        try {
          await startServer('A', { claimIdleMs: 600 });
          await expect(call(busy.client, { n: 1 })).resolves.toEqual({
            echo: { n: 1 },
            server: 'A',
          });
          await sleep(300);
          await busy.release();
          await acknowledged();
          await sleep(1500); // past claimIdleMs twice: a request left pending would run again
          expect(calls.map((c) => c.data)).toEqual([{ n: 1 }]);
        } finally {
          await busy.close();
        }
      },
    );

    itCluster(
      "runs a request once when its reply's master is busy as the reply goes out",
      async () => {
        // The reply's master is busy: the reply's MULTI is refused until it answers again.
        const busy = await withBusyMaster('reply');
        try {
          await startServer('A', { claimIdleMs: 600 });
          const answer = call(busy.client, { n: 1 });
          await waitFor('the handler ran', () => calls.length === 1);
          await sleep(1500); // past claimIdleMs twice: a request left pending would run again
          await busy.release();
          await expect(answer).resolves.toEqual({ echo: { n: 1 }, server: 'A' });
          await acknowledged();
          expect(calls.map((c) => c.data)).toEqual([{ n: 1 }]);
        } finally {
          await busy.close();
        }
      },
    );

    it('keeps alive what it runs of every stream at once, not only of one', async () => {
      const touches: Array<{ streams: number; ok: boolean }> = [];
      const touch = ConsumerGroup.prototype.touch;
      const spy = jest.spyOn(ConsumerGroup.prototype, 'touch').mockImplementation(async function (
        this: ConsumerGroup,
        ...args: Parameters<ConsumerGroup['touch']>
      ) {
        const streams = new Set(args[1].map((e) => e.key)).size;
        const ok = await touch.apply(this, args).then(
          () => true,
          () => false,
        );
        touches.push({ streams, ok });
      });
      try {
        behavior = () => hang();
        healthBehavior = () => hang();
        await startServer('A', { claimIdleMs: 400 });
        const client = await startClient({ timeoutMs: 15000 });
        void call(client, { job: 1 }).catch(() => undefined);
        void lastValueFrom(client.send(HEALTH, {})).catch(() => undefined);

        await waitFor('a touch of both streams', () => touches.some((t) => t.streams === 2));
        expect(touches.filter((t) => t.streams === 2).every((t) => t.ok)).toBe(true);
      } finally {
        spy.mockRestore();
      }
    });

    it('settles a call on its first reply: another (a redelivery answered again) is ignored', async () => {
      const client = await startClient({ timeoutMs: 15000 });
      const reply = call(client, { job: 'twice' });
      await waitFor(
        'the request in its stream',
        async () => (await redis.xlen(requestKey())) === 1,
      );
      const [[, flat]] = await redis.xrange(requestKey(), '-', '+');
      const fields = Object.fromEntries(flat.flatMap((v, i) => (i % 2 ? [] : [[v, flat[i + 1]]])));
      // Two deliveries answered it (the first one's XACK never came: on a cluster the reply and
      // the acknowledgement are two steps).
      for (const n of [1, 2])
        await redis.xadd(
          fields.replyTo,
          '*',
          'id',
          fields.id,
          'response',
          `{"n":${n}}`,
          'isDisposed',
          '1',
        );

      await expect(reply).resolves.toEqual({ n: 1 });
      await startServer('A'); // the request, still in its stream, is answered a third time
      await waitFor('the request answered', async () => (await redis.xlen(requestKey())) === 0);
      await expect(call(client, { after: true })).resolves.toEqual({
        echo: { after: true },
        server: 'A',
      });
      expect(calls.map((c) => c.data)).toEqual([{ job: 'twice' }, { after: true }]);
    });

    it('spreads 200 requests over two servers, each handled exactly once', async () => {
      behavior = async (data, _ctx, server) => {
        await sleep(5);
        return { echo: data, server };
      };
      await startServer('A', { concurrency: 4 });
      await startServer('B', { concurrency: 4 });
      const client = await startClient();

      const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => call(client, { i })));

      expect(replies.map((r) => r.echo.i)).toEqual(Array.from({ length: 200 }, (_, i) => i));
      expect(calls).toHaveLength(200);
      expect(new Set(calls.map((c) => c.data.i)).size).toBe(200);
      const byA = calls.filter((c) => c.server === 'A').length;
      expect(byA).toBeGreaterThan(0);
      expect(200 - byA).toBeGreaterThan(0);
      expect(replies.filter((r) => r.server === 'A')).toHaveLength(byA);
      expect(calls.every((c) => c.delivery === 1)).toBe(true);
    });

    it('answers a request sent while no server ran once a server starts', async () => {
      const client = await startClient({ timeoutMs: 15000 });
      const reply = call(client, { early: true });
      await waitFor(
        'the request in its stream',
        async () => (await redis.xlen(requestKey())) === 1,
      );

      await startServer('late');

      await expect(reply).resolves.toEqual({ echo: { early: true }, server: 'late' });
      expect(calls).toHaveLength(1);
    });

    it('reclaims a request from a server that stopped mid-handler', async () => {
      behavior = (data, ctx, server) => (server === 'A' ? hang() : { echo: data, server });
      const a = await startServer('A', { claimIdleMs: 500 });
      const client = await startClient({ timeoutMs: 15000 });
      const reply = call(client, { job: 1 });
      await waitFor('A to start the handler', () => calls.length === 1);

      await a.close(); // dies without acking
      await startServer('B', { claimIdleMs: 500 });

      await expect(reply).resolves.toEqual({ echo: { job: 1 }, server: 'B' });
      expect(calls.map((c) => [c.server, c.delivery])).toEqual([
        ['A', 1],
        ['B', 2],
      ]);
      await acknowledged();
    });

    it('reclaims an idle entry that sits behind more than 10 × count busy ones', async () => {
      const key = requestKey();
      const streams = new Map([[key, PATTERN]]);
      await new ConsumerGroup('dead', streams).create(redis);
      for (let n = 1; n <= 31; n++) await redis.xadd(key, '*', 'data', String(n));
      const delivered = (await redis.call(
        ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, 'dead', 'COUNT', 31, 'STREAMS', key, '>'],
      )) as [string, [string, unknown][]][];
      const ids = delivered[0][1].map(([id]) => id);
      // The 30 oldest were just delivered (busy); the newest has been idle a minute (XCLAIM's IDLE
      // sets that, so no sleep: a loaded machine cannot make the busy ones idle meanwhile).
      await redis.call('XCLAIM', key, CONSUMER_GROUP, 'dead', 0, ids[30], 'IDLE', 60_000, 'JUSTID');
      const reclaimer = new ConsumerGroup('reclaimer', streams);
      const claimed = await reclaimer.claimIdle(redis, key, 30_000, 1);
      expect(claimed.map((e) => [e.entryId, e.fields.data, e.deliveryCount])).toEqual([
        [ids[30], '31', 2],
      ]);
    });

    it('leaves no consumer behind: one that stops leaves the group unless it holds work, gone ones are forgotten', async () => {
      const consumers = async () =>
        ((await redis.xinfo('CONSUMERS', requestKey(), CONSUMER_GROUP)) as unknown[][]).map(
          (c) => c[1] as string,
        );
      const client = await startClient({ timeoutMs: 15000 });
      const a = await startServer('A');
      await call(client, { job: 1 });
      expect(await consumers()).toEqual([`A-${process.pid}`]);
      await a.close();
      expect(await consumers()).toEqual([]);

      // B stops while its handler hangs: its consumer keeps the pending entry for C to reclaim.
      behavior = (data, _ctx, server) => (server === 'B' ? hang() : { echo: data, server });
      const b = await startServer('B', { claimIdleMs: 500 });
      const reply = call(client, { job: 2 });
      await waitFor('B to start the handler', () => calls.some((c) => c.server === 'B'));
      await b.close();
      expect(await consumers()).toEqual([`B-${process.pid}`]);
      await startServer('C', { claimIdleMs: 500, forgetConsumersAfterMs: 300 });
      await expect(reply).resolves.toEqual({ echo: { job: 2 }, server: 'C' });
      // Once B holds nothing and has been idle long enough, C's reclaim loop forgets it.
      await waitFor(
        'B to be forgotten',
        async () => !(await consumers()).includes(`B-${process.pid}`),
      );
      expect(await consumers()).toEqual([`C-${process.pid}`]);
    });

    it('dead-letters a request whose handler kills every consumer, and tells the caller', async () => {
      behavior = () => hang();
      const opts = { claimIdleMs: 500, maxDeliveries: 2 };
      const client = await startClient({ timeoutMs: 20000 });
      const reply = call(client, { poison: true });
      reply.catch(() => undefined);

      for (const name of ['S1', 'S2']) {
        const server = await startServer(name, opts);
        const before = calls.length;
        await waitFor(`${name} to take the request`, () => calls.length === before + 1);
        await server.close(); // the consumer "crashes" while the handler hangs
      }
      await startServer('S3', opts);

      await expect(reply).rejects.toEqual({
        code: 'DEAD_LETTERED',
        message: expect.stringContaining('delivered 3 times'),
      });
      expect(calls.map((c) => [c.server, c.delivery])).toEqual([
        ['S1', 1],
        ['S2', 2],
      ]);
      await acknowledged();
      const dead = await redis.xrange(deadLetterStreamKey(keyPrefix, PATTERN), '-', '+');
      expect(dead).toHaveLength(1);
      const fields = Object.fromEntries(
        dead[0][1].flatMap((v, i, all) => (i % 2 ? [] : [[v, all[i + 1]]])),
      );
      // A reference to the request, not its data (redis-streams.dead-letter-copy.int-spec.ts).
      expect(fields.data).toBeUndefined();
      expect(JSON.parse(fields.ref)).toEqual({
        dataChars: JSON.stringify({ poison: true }).length,
      });
      expect(fields.reason).toContain('delivered 3 times');
      expect(fields.replyTo).toBe(clients[0].replyKey);
    });

    // A request entry is data anyone with access to the stream can write: its replyTo used to be
    // written to as is, so a malformed or hostile one made an agent XADD into any key.
    itStandalone(
      'writes no reply outside its own reply streams: such a request is dead-lettered',
      async () => {
        await startServer('A');
        const victims = [
          `${prefix}other:rpc:reply:${'a'.repeat(32)}`, // another prefix's reply stream
          `${keyPrefix}s:{c_victim01}:conversation`, // a session's data under the same prefix
          `${keyPrefix}rpc:reply:x:{${PATTERN}}`, // no reply stream's name, though it starts as one
        ];
        for (const [n, victim] of victims.entries())
          await redis.xadd(
            ...[requestKey(), '*', 'id', `hostile-${n}`, 'replyTo', victim],
            ...['deadline', String(Date.now() + 20_000), 'data', JSON.stringify({ n })],
          );

        await acknowledged();
        for (const victim of victims) expect(await redis.exists(victim)).toBe(0);
        expect(calls).toEqual([]);
        const dead = await redis.xrange(deadLetterStreamKey(keyPrefix, PATTERN), '-', '+');
        expect(dead.map(([, f]) => f[f.indexOf('reason') + 1])).toEqual(
          victims.map(() => expect.stringContaining('replyTo')),
        );
        // A well-formed one is still answered.
        await expect(call(await startClient(), { ok: 1 })).resolves.toEqual({
          echo: { ok: 1 },
          server: 'A',
        });
      },
    );

    it('fails a call with TIMEOUT at its deadline when nobody answers; the stale request is skipped', async () => {
      const client = await startClient({ timeoutMs: 300 });
      const started = Date.now();

      await expect(call(client, { lonely: true })).rejects.toEqual({
        code: 'TIMEOUT',
        message: expect.any(String),
        limit: 'silence',
      });
      const elapsed = Date.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(290);
      expect(elapsed).toBeLessThan(1000);

      await startServer('late');
      await waitFor('the expired request to be dropped', async () => {
        return (await redis.xlen(requestKey())) === 0;
      });
      expect(calls).toHaveLength(0);
    });

    it('routes replies only to the client that asked', async () => {
      await startServer('A');
      const one = await startClient();
      const two = await startClient();

      const [fromOne, fromTwo] = await Promise.all([
        Promise.all(Array.from({ length: 20 }, (_, i) => call(one, { client: 1, i }))),
        Promise.all(Array.from({ length: 20 }, (_, i) => call(two, { client: 2, i }))),
      ]);

      expect(fromOne.every((r, i) => r.echo.client === 1 && r.echo.i === i)).toBe(true);
      expect(fromTwo.every((r, i) => r.echo.client === 2 && r.echo.i === i)).toBe(true);
      expect(await repliesAdded(one.replyKey)).toBe(20);
      expect(await repliesAdded(two.replyKey)).toBe(20);
    });

    it('duplicateDeliveryForTests runs each handler twice but answers once', async () => {
      await startServer('A', { duplicateDeliveryForTests: true });
      const client = await startClient();

      const replies = await Promise.all([1, 2, 3].map((n) => call(client, { n })));

      expect(replies).toEqual([1, 2, 3].map((n) => ({ echo: { n }, server: 'A' })));
      expect(calls.map((c) => c.data.n).sort()).toEqual([1, 1, 2, 2, 3, 3]);
      expect(await repliesAdded(client.replyKey)).toBe(3);
    });

    it('re-creates its consumer group when the stream vanishes (e.g. after FLUSHALL)', async () => {
      await startServer('A');
      const client = await startClient({ timeoutMs: 15000 });
      await expect(call(client, { before: true })).resolves.toMatchObject({ server: 'A' });

      await redis.del(requestKey()); // group and stream gone, as after FLUSHALL

      await expect(call(client, { after: true })).resolves.toEqual({
        echo: { after: true },
        server: 'A',
      });
      expect(calls).toHaveLength(2);
    });

    itStandalone('keeps serving after its Redis connections are dropped', async () => {
      const consumerName = `drop-${process.pid}-${testNo}`;
      await startServer('A', { consumerName });
      const client = await startClient({ timeoutMs: 15000 });
      await expect(call(client, { n: 1 })).resolves.toMatchObject({ server: 'A' });

      const names = ['cmd', 'reader'].flatMap((type) => [
        `loom-rpc-${type}-${consumerName}`,
        `loom-rpc-client-${type}-${client.clientId}`,
      ]);
      const list = (await redis.client('LIST')) as string;
      const ours = list
        .split('\n')
        .filter((line) => names.includes(/ name=(\S*)/.exec(line)?.[1] ?? ''))
        .map((line) => /\bid=(\d+)/.exec(line)![1]);
      expect(ours).toHaveLength(4);
      for (const id of ours) await redis.client('KILL', 'ID', id);

      await expect(call(client, { n: 2 })).resolves.toEqual({ echo: { n: 2 }, server: 'A' });
      expect(calls).toHaveLength(2);
    });

    /** A proxy to the suite's Redis, and its URL (same database): its connections can be severed. */
    async function proxyToRedis(): Promise<{ proxy: FreezableTcpProxy; url: string }> {
      const url = new URL(target.url);
      const proxy = await FreezableTcpProxy.start({
        host: url.hostname,
        port: Number(url.port || 6379),
      });
      proxies.push(proxy);
      url.host = `127.0.0.1:${proxy.port}`;
      return { proxy, url: url.toString() };
    }

    itStandalone(
      'a client hears its replies again after its connections died without a reset (Redis failed over to another host at its address)',
      async () => {
        await startServer('A');
        const { proxy, url } = await proxyToRedis();
        const client = await startClient({ redisUrl: url, timeoutMs: 15000 });
        await expect(call(client, { n: 1 })).resolves.toMatchObject({ server: 'A' });
        await sleep(300); // its reply reader waits in a blocked XREAD

        // The XADD of the next call is reset and sent again on a new connection; the blocked
        // XREAD learns nothing: it used to wait on the dead one forever (every call TIMEOUT).
        proxy.sever();

        await expect(call(client, { n: 2 })).resolves.toEqual({ echo: { n: 2 }, server: 'A' });
      },
    );

    itStandalone(
      'a server takes requests again after its connections died without a reset (Redis failed over to another host at its address)',
      async () => {
        const { proxy, url } = await proxyToRedis();
        await startServer('A', { redisUrl: url, claimIdleMs: 1000 });
        const client = await startClient({ timeoutMs: 15000 });
        await expect(call(client, { n: 1 })).resolves.toMatchObject({ server: 'A' });
        await sleep(300); // its reader waits in a blocked XREADGROUP

        // Its reclaim loop's next command is reset and sent again on a new connection; the
        // blocked XREADGROUP used to wait on the dead one forever: the agent, alive and
        // beating, never took a request again.
        proxy.sever();

        await expect(call(client, { n: 2 })).resolves.toEqual({ echo: { n: 2 }, server: 'A' });
      },
    );

    itStandalone(
      'serves on after a failover that leaves its connections on the demoted primary (READONLY)',
      async () => {
        const [primary, replica] = await Promise.all([
          PrivateRedisServer.start(),
          PrivateRedisServer.start(),
        ]);
        const proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: primary.port });
        proxies.push(proxy);
        const admin = [new Redis(primary.url), new Redis(replica.url)];
        try {
          for (const r of admin) {
            // Replication without files: none is left in the working directory.
            await r.config('SET', 'repl-diskless-sync', 'yes', 'repl-diskless-sync-delay', '0');
            await r.config('SET', 'repl-diskless-load', 'swapdb');
          }
          await admin[1].replicaof('127.0.0.1', primary.port);
          const url = `redis://127.0.0.1:${proxy.port}`;
          await startServer('A', { redisUrl: url, claimIdleMs: 1000 });
          const client = await startClient({ redisUrl: url, timeoutMs: 10000 });
          await expect(call(client, { n: 1 })).resolves.toMatchObject({ server: 'A' });

          // The failover: the replica is promoted and the name now leads to it; the old primary
          // becomes its replica, and keeps the connections it had.
          await waitFor('the replica in sync', async () =>
            (await admin[1].info('replication')).includes('master_link_status:up'),
          );
          await admin[1].replicaof('NO', 'ONE');
          proxy.retarget({ host: '127.0.0.1', port: replica.port });
          await admin[0].replicaof('127.0.0.1', replica.port);

          // Every write on the old connections answered READONLY: calls failed UNAVAILABLE at
          // once, and the agent neither read nor answered again, until both were restarted.
          await expect(call(client, { n: 2 })).resolves.toEqual({ echo: { n: 2 }, server: 'A' });
        } finally {
          await Promise.all(clients.map((c) => c.close()));
          await Promise.all(apps.map((a) => a.close()));
          apps = [];
          clients = [];
          admin.forEach((r) => r.disconnect());
          await Promise.all([primary.kill(), replica.kill()]);
        }
      },
    );

    it('never runs more handlers at once than its concurrency', async () => {
      let running = 0;
      let maxRunning = 0;
      behavior = async (data, _ctx, server) => {
        maxRunning = Math.max(maxRunning, ++running);
        await sleep(10);
        running--;
        return { echo: data, server };
      };
      await startServer('A', { concurrency: 3 });
      const client = await startClient();

      const replies = await Promise.all(Array.from({ length: 30 }, (_, i) => call(client, { i })));

      expect(replies).toHaveLength(30);
      expect(calls).toHaveLength(30);
      expect(maxRunning).toBe(3);
    });

    it('lets a running handler finish and answer when the server closes', async () => {
      behavior = async (data, _ctx, server) => {
        await sleep(100);
        return { echo: data, server };
      };
      const a = await startServer('A');
      const client = await startClient({ timeoutMs: 15000 });
      const reply = call(client, { graceful: true });
      await waitFor('the handler to start', () => calls.length === 1);

      await a.close();

      await expect(reply).resolves.toEqual({ echo: { graceful: true }, server: 'A' });
      await acknowledged();
    });

    itStandalone(
      'closes while its Redis is gone, instead of waiting for Redis to come back',
      async () => {
        const own = await PrivateRedisServer.start();
        try {
          const strategy = new RedisStreamsServer({
            redisUrl: own.url,
            keyPrefix,
            consumerName: `gone-${process.pid}`,
            blockMs: 200,
          });
          const app = await NestFactory.createMicroservice(echoModule('gone'), {
            strategy,
            logger: false,
          });
          await app.listen();
          await sleep(300); // both loops are running: the reader blocked, the reclaimer between runs
          await own.kill();
          await sleep(500); // their next commands wait in the offline queue of a reconnecting client
          // Used to wait for Redis forever: an agent sent SIGTERM never exited, and kept beating.
          await app.close();
        } finally {
          await own.kill();
        }
      },
    );

    itStandalone(
      'a client closes while its Redis is unreachable, instead of waiting for Redis to come back',
      async () => {
        const client = new RedisStreamsClient({
          redisUrl: `redis://127.0.0.1:${await freePort()}`, // nothing listens there
          keyPrefix,
        });
        await client.connect();
        // Both connections failed once and wait to reconnect: the reader's XREAD sits in the queue.
        const connections = client.unwrap<[Redis, Redis]>();
        await Promise.all(
          connections.map((redis) => new Promise((resolve) => redis.once('reconnecting', resolve))),
        );
        // Used to wait forever: an orchestrator sent SIGTERM while Redis was away never exited.
        await client.close();
      },
    );

    itStandalone(
      'runs nothing a late reclaim brings once it has closed; the entry stays for another',
      async () => {
        behavior = (data, ctx, server) => (server === 'A' ? hang() : { echo: data, server });
        const a = await startServer('A', { claimIdleMs: 400 });
        const client = await startClient({ timeoutMs: 15000 });
        void call(client, { job: 'late-claim' }).catch(() => undefined);
        await waitFor('A to start the handler', () => calls.length === 1);
        await a.close(); // dies without acking: the entry stays pending on A

        // B's XAUTOCLAIM runs at once, but its answer comes back after B's close stopped waiting.
        const claims = delayClaimAnswers(3000);
        try {
          const b = await startServer('B', { claimIdleMs: 400 });
          await waitFor('B to claim the entry', () => claims.claimed);
          await b.close();
          await sleep(1500); // the claim's answer has arrived by now
          expect(calls.map((c) => c.server)).toEqual(['A']); // B ran nothing after it closed
          expect(await pendingCount()).toBe(1); // reclaimable by the next instance
        } finally {
          claims.restore();
        }
      },
    );

    itStandalone('runs what a reclaim brings in while it closes, within its drain', async () => {
      behavior = (data, ctx, server) => (server === 'A' ? hang() : { echo: data, server });
      const a = await startServer('A', { claimIdleMs: 400 });
      const client = await startClient({ timeoutMs: 15000 });
      const reply = call(client, { job: 'claimed-while-closing' });
      await waitFor('A to start the handler', () => calls.length === 1);
      await a.close();

      const claims = delayClaimAnswers(100); // answered just after close() began, within its wait
      try {
        const b = await startServer('B', { claimIdleMs: 400 });
        await waitFor('B to claim the entry', () => claims.claimed);
        await b.close();
        // Claimed, so it runs and answers rather than wait another claimIdleMs, a delivery spent.
        await expect(reply).resolves.toEqual({
          echo: { job: 'claimed-while-closing' },
          server: 'B',
        });
        await acknowledged();
      } finally {
        claims.restore();
      }
    });

    describe('progress: a call waits while its handler shows signs of life', () => {
      const slow =
        (ms: number): Behavior =>
        async (data, _ctx, server) => {
          await sleep(ms);
          return { echo: data, server };
        };
      /** Progress reports (and replies) that stop arriving: none in `ms`. */
      async function addedStops(key: string, ms: number): Promise<boolean> {
        const before = await repliesAdded(key);
        await sleep(ms);
        return (await repliesAdded(key)) === before;
      }

      it('answers a handler that runs three times the silence bound while it reports progress', async () => {
        behavior = slow(3000);
        await startServer('A');
        // Reports every 250 ms against a 1 s silence limit: slack for a loaded machine's stalls.
        const client = await startClient({ timeoutMs: 1000, maxExecutionMs: 20_000 });

        await expect(call(client, { slow: true })).resolves.toEqual({
          echo: { slow: true },
          server: 'A',
        });
        // Reported about every 250 ms while it ran, then the reply.
        expect(await repliesAdded(client.replyKey)).toBeGreaterThan(3);
      });

      it('sends no progress for a handler that ends within one report interval', async () => {
        await startServer('A');
        const client = await startClient({ timeoutMs: 4000, maxExecutionMs: 20_000 });

        await Promise.all([1, 2, 3].map((n) => call(client, { n })));

        expect(await repliesAdded(client.replyKey)).toBe(3); // the replies only
      });

      itStandalone(
        'ends a handler that never returns at maxExecutionMs, and its reports stop',
        async () => {
          behavior = () => hang();
          await startServer('A');
          const client = await startClient({ timeoutMs: 1000, maxExecutionMs: 2500 });

          await expect(call(client, { forever: true })).rejects.toEqual({
            code: 'TIMEOUT',
            message: expect.any(String),
            limit: 'total',
          });
          expect(await repliesAdded(client.replyKey)).toBeGreaterThan(3); // it did report progress
          await waitFor('the reports to stop', () => addedStops(client.replyKey, 500));
        },
      );

      it("aborts a handler's signal at the request's deadline, and answers what it then throws", async () => {
        const reasons: unknown[] = [];
        behavior = (_data, ctx) =>
          new Promise((_resolve, reject) =>
            ctx.getSignal().addEventListener('abort', () => {
              reasons.push(ctx.getSignal().reason);
              reject(new RpcException({ code: 'TIMEOUT', message: 'cancelled', limit: 'total' }));
            }),
          );
        await startServer('A');
        // Reports every 250 ms against a 1 s silence limit: slack for a loaded machine's stalls
        // (at 100 ms against 400 ms, one of 300 ms on a cluster ended the call as silent).
        const client = await startClient({ timeoutMs: 1000, maxExecutionMs: 2500 });

        await expect(call(client, { forever: true })).rejects.toEqual({
          code: 'TIMEOUT',
          message: expect.any(String),
          limit: 'total',
        });
        await waitFor('the handler to be told', () => reasons.length === 1);
        expect(reasons[0]).toBeInstanceOf(HandlerCancelled);
        expect((reasons[0] as HandlerCancelled).why).toBe('deadline');
        // What it threw was its answer: the entry is acked, not left for another instance.
        await waitFor('the entry to be acked', async () => (await pendingCount()) === 0);
        await acknowledged();
      });

      it("aborts a running handler's signal once a closing server's drain is over; its reply is dropped", async () => {
        const reasons: unknown[] = [];
        behavior = (_data, ctx) =>
          new Promise((_resolve, reject) =>
            ctx.getSignal().addEventListener('abort', () => {
              reasons.push(ctx.getSignal().reason);
              reject(new RpcException({ code: 'UNAVAILABLE', message: 'stopping' }));
            }),
          );
        const a = await startServer('A', { claimIdleMs: 400 }); // a drain of 200 ms
        const client = await startClient({ timeoutMs: 60_000 });
        const reply = call(client, { job: 'cut off' }).catch((e: unknown) => e);
        await waitFor('A to start the handler', () => calls.length === 1);

        await a.close();

        expect(reasons).toHaveLength(1);
        expect((reasons[0] as HandlerCancelled).why).toBe('closing');
        // Nothing was answered: the request stays pending, for another instance.
        expect(await pendingCount()).toBe(1);
        await client.close();
        expect(await reply).toEqual({ code: 'UNAVAILABLE', message: 'The client was closed' });
      });

      itStandalone(
        'stops waiting after the silence bound for a handler whose server stopped',
        async () => {
          behavior = () => hang();
          const a = await startServer('A', { claimIdleMs: 60_000 }); // nobody reclaims it
          const client = await startClient({ timeoutMs: 600, maxExecutionMs: 60_000 });
          const reply = call(client, { orphan: true });
          await waitFor('A to start the handler', () => calls.length === 1);

          await a.close(); // its handler still hangs, but the server reports nothing for it any more

          await expect(reply).rejects.toEqual({
            code: 'TIMEOUT',
            message: expect.any(String),
            limit: 'silence',
          });
          expect(await addedStops(client.replyKey, 500)).toBe(true);
        },
      );

      it('fails a request nobody picks up after the silence bound, and skips it later', async () => {
        const client = await startClient({ timeoutMs: 300, maxExecutionMs: 60_000 });

        await expect(call(client, { lonely: true })).rejects.toEqual({
          code: 'TIMEOUT',
          message: expect.any(String),
          limit: 'silence',
        });

        await startServer('late');
        await waitFor('the stale request to be dropped', async () => {
          return (await redis.xlen(requestKey())) === 0;
        });
        expect(calls).toHaveLength(0);
      });

      itStandalone(
        'keeps waiting for a request reclaimed from a stopped server, answered past the silence bound',
        async () => {
          const a = await startServer('A', { claimIdleMs: 400 });
          behavior = (data, ctx, server) =>
            server === 'A' ? hang() : slow(3000)(data, ctx, server);
          const client = await startClient({ timeoutMs: 2000, maxExecutionMs: 30_000 });
          const reply = call(client, { job: 'reclaimed' });
          await waitFor('A to start the handler', () => calls.length === 1);

          await a.close();
          await startServer('B', { claimIdleMs: 400 });

          await expect(reply).resolves.toEqual({ echo: { job: 'reclaimed' }, server: 'B' });
          expect(calls.map((c) => [c.server, c.delivery])).toEqual([
            ['A', 1],
            ['B', 2],
          ]);
          await acknowledged();
        },
      );
    });
  });
}
