import { ProxiedRedis, sleep, startProxiedRedis } from '@loom/testing';
import { duplicateRedis, openRedis, RedisClient } from './redis-client';

const SOCKET_TIMEOUT_MS = 1500;

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

function ready(redis: RedisClient): Promise<unknown> {
  if (redis.status === 'ready') return Promise.resolve();
  return within(new Promise((ok) => redis.once('ready', ok)), 10_000, 'ready');
}

/**
 * ioredis 5 (redis/ioredis#2147) keeps the socketTimeout timer of a command a reset left
 * unanswered, and arms no other while it exists: once it fires, it destroys the connection's
 * socket of that moment, a new and healthy one answering every command. A reset (a Redis
 * restart, a network blip) was followed, socketTimeout later, by a second disconnect out of
 * nowhere: what was in flight on it failed or ran twice, a blocked read was cut off.
 */
describe('openRedis / duplicateRedis: socketTimeout after a reset (private redis-server)', () => {
  let rig: ProxiedRedis;
  beforeAll(async () => {
    rig = await startProxiedRedis();
  });
  afterAll(() => rig?.stop());

  /**
   * Resets `redis` while a command of it is in flight, waits for that command (sent again once
   * reconnected) and then keeps the new connection busy, every command answered, until well past
   * the moment the first command's socketTimeout would have fired. Returns how many times the
   * connection closed meanwhile, and its errors.
   */
  async function closesAfterReset(
    redis: RedisClient,
  ): Promise<{ closes: number; errors: string[] }> {
    const errors: string[] = [];
    redis.on('error', (err: Error) => errors.push(err.message));
    await ready(redis);
    await within(redis.set('n', '0'), 5_000, 'SET');
    rig.proxy.resetOnNextAnswer();
    const sentAt = Date.now();
    await within(redis.incr('n'), 10_000, 'INCR sent again after the reset');
    errors.length = 0; // the reset's own
    let closes = 0;
    redis.on('close', () => closes++);
    while (Date.now() - sentAt < SOCKET_TIMEOUT_MS * 2) {
      await within(redis.ping(), 10_000, 'PING');
      await sleep(100);
    }
    return { closes, errors };
  }

  it('a connection it opened is not dropped again by the lost command', async () => {
    const redis = openRedis(
      { url: rig.proxiedUrl },
      { socketTimeout: SOCKET_TIMEOUT_MS, retryStrategy: () => 50, maxRetriesPerRequest: null },
    );
    try {
      expect(await closesAfterReset(redis)).toEqual({ closes: 0, errors: [] });
    } finally {
      redis.disconnect();
    }
  }, 30_000);

  it('a duplicate is not dropped again by the lost command', async () => {
    const original = openRedis({ url: rig.proxiedUrl }, { lazyConnect: true });
    const redis = duplicateRedis(original, {
      lazyConnect: false,
      socketTimeout: SOCKET_TIMEOUT_MS,
      retryStrategy: () => 50,
      maxRetriesPerRequest: null,
    });
    try {
      expect(await closesAfterReset(redis)).toEqual({ closes: 0, errors: [] });
    } finally {
      redis.disconnect();
      original.disconnect();
    }
  }, 30_000);
});
