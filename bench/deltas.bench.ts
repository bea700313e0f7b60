/**
 * The orchestrator's side of streamed replies: DeltaChannel's shared readers beside the reader it
 * had before (a connection per subscription: delta-reader.baseline.ts), on a private redis-server
 * and on a private three-master Redis Cluster, through the orchestrator's kind of connection
 * (createRedis), in one run:
 *  - publish → onDelta with one subscription, one delta at a time (0–30 ms apart, at random);
 *  - a subscription's first delta (already in its stream) after subscribe(), and its stop()
 *    20 ms later (what a turn waits for between the agent's reply and its `done` event);
 *  - with 1,000 subscriptions open at once: the connections they hold (CLIENT LIST), Redis CPU
 *    while none has a delta, and publish → onDelta of 1,000 deltas sent to them in turn, 1 ms
 *    apart.
 * The servers end after, with every key.
 */
import { DeltaChannel } from '@loom/agent-kit';
import { createRedis, masters, RedisClient } from '@loom/session';
import { PrivateRedisCluster, PrivateRedisServer, sleep } from '@loom/testing';
import { onInterrupt } from './interrupt';
import { subscribePerConnection } from './delta-reader.baseline';
import { ms, summarize, table } from './stats';

const PREFIX = 'loombench:';
const SEQUENTIAL = 500;
const WARMUP = 50;
const PER_EXECUTION = 40;
const CONCURRENT = 1000;
const IDLE_MS = 3000;
const SPREAD_MS = 30;
const REPLY_AFTER_MS = 20;
const LOAD_DELTAS = 1000;

interface Readers {
  subscribe(conversationId: string, onDelta: (text: string) => void): { stop(): Promise<void> };
  close(): Promise<void>;
}

type Open = (redis: RedisClient, connectionName: string) => Readers;

const READERS: Record<string, Open> = {
  'shared readers': (redis, connectionName) => {
    const channel = new DeltaChannel(redis, PREFIX, { connectionName });
    return {
      subscribe: (id, onDelta) => channel.subscribe(id, 'a_bench', onDelta),
      close: () => channel.close(),
    };
  },
  'a connection per subscription (before)': (redis, connectionName) => ({
    subscribe: (id, onDelta) =>
      subscribePerConnection(redis, `${PREFIX}deltas:{${id}}:a_bench`, onDelta, connectionName),
    close: async () => undefined,
  }),
};

interface Result {
  sequential: number[];
  firstDelta: number[];
  stop: number[];
  connections: number;
  idleCpuMsPerS: number;
  loaded: number[];
}

/** Resolves the next delivery of `id`, with the time it came. */
function deliveries() {
  const waiting = new Map<string, (at: number) => void>();
  return {
    next: (id: string) => new Promise<number>((resolve) => waiting.set(id, resolve)),
    onDelta: (id: string) => () => {
      const resolve = waiting.get(id);
      waiting.delete(id);
      resolve?.(performance.now());
    },
  };
}

async function measure(redis: RedisClient, open: Open, run: number): Promise<Result> {
  const name = `loom-deltas-bench-${run}`;
  const readers = open(redis, name);
  const publisher = new DeltaChannel(redis, PREFIX);
  const d = deliveries();
  try {
    const one = readers.subscribe(`c_seq_${run}`, d.onDelta('seq'));
    const sequential: number[] = [];
    for (let i = 0; i < WARMUP + SEQUENTIAL; i++) {
      // Deltas come when the model writes them, not in step with a reader's rounds.
      await sleep(Math.random() * SPREAD_MS);
      const got = d.next('seq');
      const t0 = performance.now();
      await publisher.publish(`c_seq_${run}`, 'a_bench', `${i}`);
      if (i >= WARMUP) sequential.push((await got) - t0);
      else await got;
    }
    await one.stop();

    const firstDelta: number[] = [];
    const stop: number[] = [];
    for (let i = 0; i < PER_EXECUTION; i++) {
      const id = `c_exec_${run}_${i}`;
      await publisher.publish(id, 'a_bench', 'first');
      const got = d.next(id);
      const t0 = performance.now();
      const sub = readers.subscribe(id, d.onDelta(id));
      firstDelta.push((await got) - t0);
      // The agent's reply comes a moment after its last delta: the reader is waiting again.
      await sleep(REPLY_AFTER_MS);
      const t1 = performance.now();
      await sub.stop();
      stop.push(performance.now() - t1);
    }

    const ids = Array.from({ length: CONCURRENT }, (_, i) => `c_con_${run}_${i}`);
    const subs = ids.map((id) => readers.subscribe(id, d.onDelta(id)));
    // Every subscription reading (its connection up) before anything is measured.
    await Promise.all(
      ids.map(async (id) => {
        const got = d.next(id);
        await publisher.publish(id, 'a_bench', 'p');
        await got;
      }),
    );
    const connections = await namedConnections(redis, name);
    const cpu0 = await redisCpuMs(redis);
    await sleep(IDLE_MS);
    const idleCpuMsPerS = ((await redisCpuMs(redis)) - cpu0) / (IDLE_MS / 1000);
    // Deltas to all of them, one after another, 1 ms apart: what many concurrent streams bring.
    const underLoad: Array<Promise<number>> = [];
    for (let i = 0; i < LOAD_DELTAS; i++) {
      const id = ids[i % CONCURRENT];
      const got = d.next(id);
      const t0 = performance.now();
      await publisher.publish(id, 'a_bench', `${i}`);
      underLoad.push(got.then((at) => at - t0));
      await sleep(1);
    }
    const loaded = await Promise.all(underLoad);
    await Promise.all(subs.map((s) => s.stop()));
    return { sequential, firstDelta, stop, connections, idleCpuMsPerS, loaded };
  } finally {
    await readers.close();
  }
}

async function namedConnections(redis: RedisClient, name: string): Promise<number> {
  const lists = await Promise.all(masters(redis).map((m) => m.client('LIST') as Promise<string>));
  return lists.flatMap((list) => list.split('\n')).filter((l) => l.includes(` name=${name} `))
    .length;
}

/** CPU ms (user + sys) every master has used since it started. */
async function redisCpuMs(redis: RedisClient): Promise<number> {
  const infos = await Promise.all(masters(redis).map((m) => m.info('cpu')));
  return infos.reduce((sum, info) => {
    const field = (f: string) => Number(new RegExp(`^${f}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 0);
    return sum + (field('used_cpu_user') + field('used_cpu_sys')) * 1000;
  }, 0);
}

async function ready(redis: RedisClient): Promise<RedisClient> {
  redis.on('error', () => undefined);
  if (redis.status !== 'ready') await new Promise((ok) => redis.once('ready', ok));
  return redis;
}

export async function run(): Promise<void> {
  const server = await PrivateRedisServer.start();
  const killServer = onInterrupt(() => server.kill());
  const cluster = await PrivateRedisCluster.start().catch(async (err: unknown) => {
    await killServer();
    throw err;
  });
  const stopCluster = onInterrupt(() => cluster.stop()); // its temp dir too
  const targets = {
    standalone: await ready(createRedis(server.url, 'loom-session')),
    cluster: await ready(
      createRedis({ url: cluster.url, clusterNodes: cluster.seeds }, 'loom-session'),
    ),
  };
  const rows: string[][] = [];
  let run = 0;
  try {
    for (const [where, redis] of Object.entries(targets))
      for (const [how, open] of Object.entries(READERS)) {
        const r = await measure(redis, open, ++run);
        const [seq, first, stop, loaded] = [r.sequential, r.firstDelta, r.stop, r.loaded].map(
          summarize,
        );
        rows.push([
          `${where}, ${how}`,
          `${ms(seq.p50)} / ${ms(seq.p99)}`,
          ms(first.p50),
          ms(stop.p50),
          String(r.connections),
          r.idleCpuMsPerS.toFixed(0),
          `${ms(loaded.p50)} / ${ms(loaded.p99)}`,
        ]);
      }
  } finally {
    Object.values(targets).forEach((redis) => redis.disconnect());
    await killServer();
    await stopCluster();
  }
  console.log(
    table(
      [
        'readers',
        'publish → onDelta p50 / p99 ms',
        'first delta p50',
        'stop() p50',
        `connections, ${CONCURRENT} subs`,
        'Redis CPU ms/s idle',
        `publish → onDelta, ${CONCURRENT} open p50 / p99`,
      ],
      rows,
    ),
  );
}
