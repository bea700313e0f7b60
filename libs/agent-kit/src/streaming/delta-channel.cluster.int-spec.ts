import { createRedis, masters, RedisClient } from '@loom/session';
import { PrivateRedisCluster, sleep } from '@loom/testing';
import { DeltaChannel } from './delta-channel';

const PER_MASTER = 10;

/**
 * DeltaChannel on a Redis Cluster of this file's own, through the orchestrator's kind of
 * connection (createRedis). No XREAD spans slots there, not even slots of one master: the
 * streams of many conversations on every master are read by one connection per master.
 */
describe('DeltaChannel on a Redis Cluster', () => {
  let cluster: PrivateRedisCluster;
  let redis: RedisClient;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    redis = createRedis({ url: cluster.url, clusterNodes: cluster.seeds }, 'loom-session');
    redis.on('error', () => undefined);
    if (redis.status !== 'ready') await new Promise((ok) => redis.once('ready', ok));
  });
  afterAll(async () => {
    redis?.disconnect();
    await cluster?.stop();
  });

  /** Conversation ids whose delta keys sit in `PER_MASTER` different slots of every master. */
  async function conversationsOnEveryMaster(): Promise<string[]> {
    const ranges = (await redis.cluster('SLOTS')) as unknown as Array<
      [number, number, [string, number]]
    >;
    const byPort = new Map<number, Set<number>>(cluster.ports.map((p) => [p, new Set()]));
    const ids: string[] = [];
    for (let i = 0; [...byPort.values()].some((slots) => slots.size < PER_MASTER); i++) {
      const slot = Number(await redis.cluster('KEYSLOT', `{c_spread_${i}}`));
      const slots = byPort.get(ranges.find(([from, to]) => slot >= from && slot <= to)![2][1])!;
      if (slots.size >= PER_MASTER || slots.has(slot)) continue;
      slots.add(slot);
      ids.push(`c_spread_${i}`);
    }
    return ids;
  }

  it('reads streams of many slots on every master with one connection per master', async () => {
    const channel = new DeltaChannel(redis, 'loomdeltas:', {
      connectionName: 'loom-deltas-spread',
    });
    try {
      const ids = await conversationsOnEveryMaster();
      const seen = new Map(ids.map((id) => [id, [] as string[]]));
      const subs = ids.map((id) => channel.subscribe(id, 'a_spread', (t) => seen.get(id)!.push(t)));
      for (const text of ['one ', 'two ', 'three'])
        await Promise.all(ids.map((id) => channel.publish(id, 'a_spread', `${id} ${text}`)));
      while ([...seen.values()].some((got) => got.length < 3)) await sleep(10);

      const named = await Promise.all(
        masters(redis).map(async (node) =>
          ((await node.client('LIST')) as string)
            .split('\n')
            .filter((line) => line.includes(' name=loom-deltas-spread ')),
        ),
      );
      expect(named.map((lines) => lines.length)).toEqual([1, 1, 1]);

      await Promise.all(subs.map((s) => s.stop()));
      for (const id of ids)
        expect(seen.get(id)).toEqual([`${id} one `, `${id} two `, `${id} three`]);
      const left = await Promise.all(
        ids.map((id) => redis.exists(`loomdeltas:deltas:{${id}}:a_spread`)),
      );
      expect(left.every((n) => n === 0)).toBe(true);
    } finally {
      await channel.close();
    }
  });

  it('stop() delivers what was published just before it, then deletes the stream', async () => {
    const channel = new DeltaChannel(redis, 'loomdeltas:', { connectionName: 'loom-deltas-stop' });
    try {
      const seen: string[] = [];
      const sub = channel.subscribe('c_cluster_drain', 'a_drain', (t) => seen.push(t));
      const texts = Array.from({ length: 250 }, (_, i) => `${i} `);
      for (const text of texts) await channel.publish('c_cluster_drain', 'a_drain', text);
      await sub.stop();
      expect(seen).toEqual(texts);
      expect(await redis.exists('loomdeltas:deltas:{c_cluster_drain}:a_drain')).toBe(0);
    } finally {
      await channel.close();
    }
  });

  it('goes on reading the other masters while one is down, and that one once it is back', async () => {
    const channel = new DeltaChannel(redis, 'loomdeltas:', { connectionName: 'loom-deltas-down' });
    try {
      const [a, b] = await conversationsOnEveryMaster();
      const seen = { [a]: [] as string[], [b]: [] as string[] };
      const subs = [a, b].map((id) => channel.subscribe(id, 'a_down', (t) => seen[id].push(t)));
      const port = await cluster.portOf(`loomdeltas:deltas:{${a}}:a_down`);
      await cluster.kill(port);
      // One delta after the other, each read before the next is sent: were the reads of the
      // dead master's slot to hold up every round (ioredis gives up on it after ~1.5 s), these
      // would outlast the cluster's node timeout (5 s), and it would refuse every slot.
      const texts = ['while ', 'one ', 'master ', 'is ', 'down'];
      for (const text of texts) {
        await channel.publish(b, 'a_down', text);
        while (!seen[b].includes(text)) await sleep(10);
      }
      await cluster.restartMaster(port);
      // The session connection fails fast (no offline queue) until the client sees the master.
      for (let sent = false; !sent; await sleep(100))
        sent = await channel.publish(a, 'a_down', 'after').then(
          () => true,
          () => false,
        );
      while (seen[a].length < 1) await sleep(10);
      await Promise.all(subs.map((s) => s.stop()));
      expect(seen).toEqual({ [a]: ['after'], [b]: texts });
    } finally {
      await channel.close();
    }
  });
});
