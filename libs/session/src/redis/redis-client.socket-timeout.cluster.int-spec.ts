import { once } from 'events';
import { FreezableTcpProxy, PrivateRedisCluster } from '@loom/testing';
import { openRedis } from './redis-client';

/** `promise`, or an error naming `what` once `ms` have passed: no await here can hang the suite. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, gaveUp]);
  } finally {
    clearTimeout(timer);
  }
}

/** A socketTimeout no other timer here has: its timers are told apart by their delay. */
const SOCKET_TIMEOUT_MS = 43_210;

/**
 * From the call on, records every setTimeout of `ms`; `live()` counts those still pending and
 * holding the process open. `restore()` puts the global back.
 */
function timersOf(ms: number): { live(): number; restore(): void } {
  const g = globalThis as { setTimeout: typeof setTimeout };
  const original = g.setTimeout;
  const started: NodeJS.Timeout[] = [];
  g.setTimeout = ((fn: (...args: unknown[]) => void, delay?: number, ...args: unknown[]) => {
    const timer = original(() => fn(...args), delay);
    if (delay === ms) started.push(timer);
    return timer;
  }) as typeof setTimeout;
  return {
    live: () =>
      started.filter(
        (timer) => !(timer as unknown as { _destroyed: boolean })._destroyed && timer.hasRef(),
      ).length,
    restore: () => {
      g.setTimeout = original;
    },
  };
}

/**
 * A Cluster node connection reset with a command in flight is dropped from the pool for good
 * (ioredis opens another). ioredis 5 (redis/ioredis#2147) kept that command's socketTimeout
 * timer on the dropped connection: a process that had closed its client stayed up for as long.
 */
describe('openRedis (Cluster): socketTimeout after a reset of a node connection', () => {
  let cluster: PrivateRedisCluster;
  let proxies: FreezableTcpProxy[];

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    proxies = await Promise.all(
      cluster.ports.map((port) => FreezableTcpProxy.start({ host: '127.0.0.1', port })),
    );
  });
  afterAll(async () => {
    await Promise.all((proxies ?? []).map((proxy) => proxy.close()));
    await cluster?.stop();
  });

  it('leaves no timer of the lost command once the client is closed', async () => {
    const key = 'sockettimeout:{a}';
    const proxy = proxies[cluster.ports.indexOf(await cluster.portOf(key))];
    const timers = timersOf(SOCKET_TIMEOUT_MS);
    const redis = openRedis(
      {
        url: `redis://127.0.0.1:${proxies[0].port}`,
        clusterNodes: proxies.map((p) => `127.0.0.1:${p.port}`),
        natMap: Object.fromEntries(
          cluster.ports.map((port, i) => [
            `127.0.0.1:${port}`,
            { host: '127.0.0.1', port: proxies[i].port },
          ]),
        ),
      },
      { socketTimeout: SOCKET_TIMEOUT_MS, maxRetriesPerRequest: null },
    );
    redis.on('error', () => undefined);
    try {
      if (redis.status !== 'ready') await within(once(redis, 'ready'), 10_000, 'ready');
      await within(redis.set(key, '0'), 5_000, 'SET');
      proxy.resetOnNextAnswer();
      // Its answer is lost with the node connection; the Cluster client may send it again.
      await within(
        redis.incr(key).catch(() => undefined),
        10_000,
        'INCR',
      );
      await within(redis.get(key), 10_000, 'GET');
    } finally {
      const ended = once(redis, 'end');
      redis.disconnect();
      await within(ended, 10_000, 'end').catch(() => undefined);
      timers.restore();
    }
    expect(timers.live()).toBe(0);
  }, 60_000);
});
