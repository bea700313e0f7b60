import Redis from 'ioredis';
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

  /** Per master (its port), conversation ids whose delta keys sit in `PER_MASTER` slots of it. */
  async function conversationsByMaster(): Promise<Map<number, string[]>> {
    const ranges = (await redis.cluster('SLOTS')) as unknown as Array<
      [number, number, [string, number]]
    >;
    const byPort = new Map<number, string[]>(cluster.ports.map((p) => [p, []]));
    const slots = new Set<number>();
    for (let i = 0; [...byPort.values()].some((ids) => ids.length < PER_MASTER); i++) {
      const slot = Number(await redis.cluster('KEYSLOT', `{c_spread_${i}}`));
      const ids = byPort.get(ranges.find(([from, to]) => slot >= from && slot <= to)![2][1])!;
      if (ids.length >= PER_MASTER || slots.has(slot)) continue;
      slots.add(slot);
      ids.push(`c_spread_${i}`);
    }
    return byPort;
  }

  it('reads streams of many slots on every master with one connection per master', async () => {
    const channel = new DeltaChannel(redis, 'loomdeltas:', {
      connectionName: 'loom-deltas-spread',
    });
    try {
      const ids = [...(await conversationsByMaster()).values()].flat();
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
      const [[a], [b]] = (await conversationsByMaster()).values();
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

  it('follows a slot moved to another master while the others of its master stay', async () => {
    const channel = new DeltaChannel(redis, 'loomdeltas:', { connectionName: 'loom-deltas-move' });
    try {
      // Two conversations of one master: a's slot alone moves, while the reader's pipeline to
      // that master carries the reads of both.
      const [[from, [a, stays]]] = await conversationsByMaster();
      const seen = { [a]: [] as string[], [stays]: [] as string[] };
      const subs = [a, stays].map((id) => channel.subscribe(id, 'a_move', (t) => seen[id].push(t)));
      await channel.publish(a, 'a_move', 'before ');
      while (seen[a].length < 1) await sleep(10);

      const to = cluster.ports.find((port) => port !== from)!;
      await moveSlot(`loomdeltas:deltas:{${a}}:a_move`, from, to);
      for (let sent = false; !sent; await sleep(100))
        sent = await channel.publish(a, 'a_move', 'after').then(
          () => true,
          () => false,
        );
      await channel.publish(stays, 'a_move', 'stayed');
      while (seen[a].length < 2 || seen[stays].length < 1) await sleep(10);
      await Promise.all(subs.map((s) => s.stop()));
      expect(seen).toEqual({ [a]: ['before ', 'after'], [stays]: ['stayed'] });
    } finally {
      await channel.close();
    }
  });

  /** Moves the slot of `key`, with its keys, from the master at `from` to the one at `to`. */
  async function moveSlot(key: string, from: number, to: number): Promise<void> {
    const [source, target] = [from, to].map((port) => new Redis(port, '127.0.0.1'));
    try {
      const slot = Number(await source.cluster('KEYSLOT', key));
      const [sourceId, targetId] = await Promise.all(
        [source, target].map((n) => n.cluster('MYID')),
      );
      await target.cluster('SETSLOT', slot, 'IMPORTING', sourceId);
      await source.cluster('SETSLOT', slot, 'MIGRATING', targetId);
      const keys = (await source.cluster('GETKEYSINSLOT', slot, 1000)) as string[];
      if (keys.length) await source.migrate('127.0.0.1', to, '', 0, 5000, 'KEYS', ...keys);
      for (const port of cluster.ports) {
        const node = new Redis(port, '127.0.0.1');
        await node.cluster('SETSLOT', slot, 'NODE', targetId).finally(() => node.disconnect());
      }
    } finally {
      source.disconnect();
      target.disconnect();
    }
  }
});
