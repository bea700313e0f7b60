import Redis from 'ioredis';
import { currentMdc, runWithMdc } from '@loom/observability';
import {
  createTestPrefix,
  PrivateRedisServer,
  sleep,
  TEST_REDIS_URL,
  trackTimers,
} from '@loom/testing';
import { DeltaChannel, DeltaChannelOptions } from './delta-channel';

/** The connections named `name` that `redis`'s server holds (CLIENT LIST lines). */
async function clients(redis: Redis, name: string): Promise<string[]> {
  const list = (await redis.client('LIST')) as string;
  return list.split('\n').filter((line) => line.includes(` name=${name} `));
}

async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await check())) await sleep(10);
}

describe('DeltaChannel (real Redis)', () => {
  const { prefix, cleanup } = createTestPrefix('loomdelta');
  const redis = new Redis(TEST_REDIS_URL);
  const channels: DeltaChannel[] = [];
  let names = 0;
  /** A channel whose readers carry a connection name of their own: CLIENT LIST finds them. */
  const open = (options: DeltaChannelOptions = {}) => {
    const connectionName = `${prefix.replace(/:$/, '')}-${++names}`;
    const channel = new DeltaChannel(redis, prefix, { connectionName, ...options });
    channels.push(channel);
    return { channel, connectionName };
  };
  afterEach(async () => {
    await Promise.all(channels.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    await cleanup();
    await redis.quit();
  });

  it('relays every delta in order, and deletes the stream once read to the end', async () => {
    const { channel } = open();
    const seen: string[] = [];
    const sub = channel.subscribe('c_delta_conv', 'a_delta_session', (t) => seen.push(t));
    for (const text of ['劳动', '合同', ' ok'])
      await channel.publish('c_delta_conv', 'a_delta_session', text);
    const key = `${prefix}deltas:{c_delta_conv}:a_delta_session`;
    expect(await redis.exists(key)).toBe(1);
    await sub.stop();
    expect(seen).toEqual(['劳动', '合同', ' ok']);
    // The reply text does not outlive the turn in Redis (a conversation deleted right after).
    expect(await redis.exists(key)).toBe(0);
  });

  // The readers are shared by every turn of the process, and opened by the first one to
  // subscribe: a turn's onDelta must still run in its own turn's context (its correlation id,
  // its tenant), not in the opener's, nor, in the embedded profile, in the publishing agent's.
  it.each([
    ['Redis', true],
    ['in memory (embedded)', false],
  ])('%s: calls onDelta in the context of the turn that subscribed', async (_, withRedis) => {
    const channel = withRedis ? open().channel : new DeltaChannel(null, prefix);
    channels.push(channel);
    const seen: Array<Record<string, string>> = [];
    const first = runWithMdc({ correlationId: 'turn-first', tenantId: 'tenant-a' }, () =>
      channel.subscribe('c_ctx_first', 'a_ctx', () => undefined),
    );
    const second = runWithMdc({ correlationId: 'turn-second', tenantId: 'tenant-b' }, () =>
      channel.subscribe('c_ctx_second', 'a_ctx', () => seen.push(currentMdc())),
    );
    // As the agent publishes: in its execution's context.
    await runWithMdc({ correlationId: 'agent-side', agentType: 'labor-law' }, () =>
      channel.publish('c_ctx_second', 'a_ctx', 'hello'),
    );
    await until(() => seen.length === 1);
    await Promise.all([first.stop(), second.stop()]);
    expect(seen).toEqual([{ correlationId: 'turn-second', tenantId: 'tenant-b' }]);
  });

  it('reads 200 concurrent subscriptions over one connection, each its own deltas in order', async () => {
    const { channel, connectionName } = open();
    const seen = Array.from({ length: 200 }, () => [] as string[]);
    const subs = seen.map((got, i) =>
      channel.subscribe(`c_many_${i}`, 'a_many', (t) => got.push(t)),
    );
    for (let round = 0; round < 3; round++)
      await Promise.all(
        seen.map((_, i) => channel.publish(`c_many_${i}`, 'a_many', `${i}.${round}`)),
      );
    await until(() => seen.every((got) => got.length === 3));
    expect(await clients(redis, connectionName)).toHaveLength(1);
    await Promise.all(subs.map((s) => s.stop()));
    seen.forEach((got, i) => expect(got).toEqual([`${i}.0`, `${i}.1`, `${i}.2`]));
    expect(await redis.exists(...seen.map((_, i) => `${prefix}deltas:{c_many_${i}}:a_many`))).toBe(
      0,
    );
  });

  it('takes a second connection past 1,000 subscriptions (one XREAD names at most 1,000)', async () => {
    const { channel, connectionName } = open();
    const seen = Array.from({ length: 1001 }, () => undefined as string | undefined);
    const subs = [...seen.keys()].map((i) =>
      channel.subscribe('c_wide', `a_${i}`, (t) => (seen[i] = t)),
    );
    await Promise.all([...seen.keys()].map((i) => channel.publish('c_wide', `a_${i}`, `${i}`)));
    await until(() => seen.every((t, i) => t === `${i}`));
    expect(await clients(redis, connectionName)).toHaveLength(2);
    await Promise.all(subs.map((s) => s.stop()));
  });

  it('reads a subscription that joins while the reader blocks at once, not when its BLOCK ends', async () => {
    // BLOCK 30 s, this test 5 s: only a woken XREAD can deliver within it.
    const { channel, connectionName } = open({ blockMs: 30_000 });
    const first = channel.subscribe('c_wake', 'a_first', () => undefined);
    await until(
      async () => (await clients(redis, connectionName))[0]?.includes(' flags=b ') ?? false,
    );
    const seen: string[] = [];
    const second = channel.subscribe('c_wake', 'a_second', (t) => seen.push(t));
    await channel.publish('c_wake', 'a_second', 'at once');
    await until(() => seen.length === 1);
    // A stop ends the block too: it drains and deletes without waiting for the BLOCK.
    await channel.publish('c_wake', 'a_second', 'last');
    await Promise.all([first.stop(), second.stop()]);
    expect(seen).toEqual(['at once', 'last']);
    expect(await redis.exists(`${prefix}deltas:{c_wake}:a_second`)).toBe(0);
  }, 5000);

  it('close() while the reader blocks leaves no timer of its command pending', async () => {
    // ioredis 5 keeps the socketTimeout timer (BLOCK + 2 s) of a command in flight when its
    // connection is disconnected (redis/ioredis#2147): a closed process would stay up for it.
    const timers = trackTimers();
    try {
      const { channel, connectionName } = open({ blockMs: 30_000 });
      channel.subscribe('c_close', 'a_close', () => undefined);
      await until(
        async () => (await clients(redis, connectionName))[0]?.includes(' flags=b ') ?? false,
      );
      await channel.close();
      expect(timers.live()).toEqual([]);
    } finally {
      timers.restore();
    }
  });

  it('stop() delivers what was published just before it, then deletes the stream', async () => {
    const { channel } = open({ blockMs: 30_000 });
    const seen: string[] = [];
    const sub = channel.subscribe('c_drain', 'a_drain', (t) => seen.push(t));
    const texts = Array.from({ length: 250 }, (_, i) => `${i} `);
    for (const text of texts) await channel.publish('c_drain', 'a_drain', text);
    await sub.stop();
    // 250 entries: more than one XREAD takes of a stream (100), all delivered before stop().
    expect(seen).toEqual(texts);
    expect(await redis.exists(`${prefix}deltas:{c_drain}:a_drain`)).toBe(0);
  }, 5000);

  it('goes on for the others when one subscriber fails', async () => {
    const { channel } = open();
    const seen: string[] = [];
    const failing = channel.subscribe('c_fail', 'a_bad', () => {
      throw new Error('the SSE response is gone');
    });
    const fine = channel.subscribe('c_fail', 'a_good', (t) => seen.push(t));
    for (const text of ['a', 'b', 'c']) {
      await channel.publish('c_fail', 'a_bad', text);
      await channel.publish('c_fail', 'a_good', text);
    }
    await Promise.all([failing.stop(), fine.stop()]);
    expect(seen).toEqual(['a', 'b', 'c']);
    expect(await redis.exists(`${prefix}deltas:{c_fail}:a_bad`)).toBe(0);
  });

  it('relays one delivery of an execution: one run again writes its answer from the start', async () => {
    for (const channel of [open().channel, new DeltaChannel(null, prefix)]) {
      const seen: string[] = [];
      const sub = channel.subscribe('c_again', 'a_again', (t) => seen.push(t));
      await channel.publish('c_again', 'a_again', 'you said', 'first');
      // The first delivery stopped mid-answer; another instance runs it again, from the start.
      for (const text of ['you said', ': hi'])
        await channel.publish('c_again', 'a_again', text, 'second');
      await channel.publish('c_again', 'a_again', ' (late)', 'first');
      await sub.stop();
      expect(seen).toEqual(['you said', ' (late)']);
    }
  });

  it('relays one execution to two subscriptions of it, each in order', async () => {
    const { channel } = open();
    const [one, two] = [[] as string[], [] as string[]];
    const first = channel.subscribe('c_twice', 'a_twice', (t) => one.push(t));
    await channel.publish('c_twice', 'a_twice', 'x');
    await until(() => one.length === 1);
    const second = channel.subscribe('c_twice', 'a_twice', (t) => two.push(t));
    await channel.publish('c_twice', 'a_twice', 'y');
    await until(() => two.length === 2);
    await Promise.all([first.stop(), second.stop()]);
    expect([one, two]).toEqual([
      ['x', 'y'],
      ['x', 'y'],
    ]);
  });

  describe('on a redis-server that restarts', () => {
    let server: PrivateRedisServer;
    let own: Redis;
    beforeAll(async () => {
      server = await PrivateRedisServer.start();
      own = new Redis(server.url);
      own.on('error', () => undefined);
    });
    afterAll(async () => {
      own?.disconnect();
      await server?.kill();
    });

    it('relays the deltas published after the restart', async () => {
      const channel = new DeltaChannel(own, prefix, { connectionName: 'loom-deltas-restart' });
      channels.push(channel);
      const seen: string[] = [];
      const sub = channel.subscribe('c_restart', 'a_restart', (t) => seen.push(t));
      await channel.publish('c_restart', 'a_restart', 'before');
      await until(() => seen.length === 1);
      await server.kill();
      await server.restart();
      await channel.publish('c_restart', 'a_restart', 'after');
      await until(() => seen.length === 2);
      await sub.stop();
      expect(seen).toEqual(['before', 'after']);
      expect(await own.exists(`${prefix}deltas:{c_restart}:a_restart`)).toBe(0);
      expect(await clients(own, 'loom-deltas-restart')).toHaveLength(1);
    });
  });
});
