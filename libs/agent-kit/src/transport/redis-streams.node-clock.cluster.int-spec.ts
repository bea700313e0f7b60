import type Redis from 'ioredis';
import { lastValueFrom } from 'rxjs';
import { hashSlot, isCluster, RedisClient } from '@loom/session';
import { PrivateRedisCluster, sleep } from '@loom/testing';
import { RedisStreamsClient } from './redis-streams.client';
import { requestStreamKey } from './redis-streams.options';

/**
 * A client reads each master's clock (TIME) once, for the `sendBy` of its first request to
 * each stream there. It kept that clock on the master's first connection: ioredis ends a node
 * connection that fails and opens a new one to the same `host:port` once the master is back,
 * and the clock still asked the ended one, for good. A master away when the client started
 * (restarted at its address since) never had its clock read: no first request to a stream of
 * it carried `sendBy`, so one whose XADD landed after its caller was told UNAVAILABLE ran.
 */
describe('RedisStreamsClient on a Redis Cluster: the clock of a master restarted at its address', () => {
  let cluster: PrivateRedisCluster;
  let probe: RedisClient;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    probe = await cluster.client();
  }, 60_000);
  afterAll(async () => {
    probe?.disconnect();
    await cluster?.stop();
  });

  it('gives the first request to each of its streams a sendBy, once the master is back', async () => {
    const keyPrefix = `nodeclock${Date.now()}:`;
    const ranges = (await probe.cluster('SLOTS')) as unknown as Array<
      [number, number, [string, number]]
    >;
    const portOf = (key: string) => {
      const slot = hashSlot(key);
      return Number(ranges.find(([from, to]) => slot >= from && slot <= to)![2][1]);
    };
    const port = cluster.ports[0];
    // Request streams held by that master, each new to the client.
    const patterns = Array.from({ length: 120 }, (_, i) => `agent.clock${i}.execute`).filter(
      (pattern) => portOf(requestStreamKey(keyPrefix, pattern)) === port,
    );

    await cluster.kill(port); // away while the client starts
    const client = new RedisStreamsClient({
      redisUrl: cluster.url,
      redisClusterNodes: cluster.seeds,
      keyPrefix,
      timeoutMs: 500,
    });
    await client.connect();
    try {
      const [cmd] = client.unwrap<[RedisClient]>();
      const nodeAt = (): Redis | undefined =>
        isCluster(cmd) ? cmd.nodes('master').find((node) => node.options.port === port) : undefined;
      for (let i = 0; i < 200 && cmd.status !== 'ready'; i++) await sleep(50);
      expect(cmd.status).toBe('ready');
      // Its connection to the master away has ended: the clock's TIME failed.
      const first = nodeAt();
      for (let i = 0; i < 200 && first && first.status !== 'end'; i++) await sleep(50);
      expect(first?.status ?? 'end').toBe('end');

      await cluster.restartMaster(port);
      // One request at a time to a stream of that master new to the client, until one carries
      // sendBy (its clock read on the new connection) or none is left.
      let carried: string[] | undefined;
      for (const pattern of patterns) {
        await lastValueFrom(client.send(pattern, { q: 1 })).catch(() => undefined); // TIMEOUT
        const key = requestStreamKey(keyPrefix, pattern);
        const [[, fields] = ['', [] as string[]]] = await probe.xrange(key, '-', '+');
        if (fields.includes('sendBy')) {
          carried = fields;
          break;
        }
      }
      expect(nodeAt()).not.toBe(first);
      expect(carried).toContain('sendBy');
    } finally {
      await client.close();
    }
  }, 90_000);
});
