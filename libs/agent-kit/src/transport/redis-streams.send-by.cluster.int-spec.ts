import { lastValueFrom } from 'rxjs';
import { hashSlot } from '@loom/session';
import { appProcesses, PrivateRedisCluster } from '@loom/testing';
import { RedisStreamsClient } from './redis-streams.client';
import { requestStreamKey } from './redis-streams.options';
import { entryMs } from './redis-streams.send-by';

// A request's `sendBy` is what lets the agent skip an XADD that ran after its caller was told
// UNAVAILABLE (resent after a reconnect, held up in the network). On a standalone Redis the
// first request to each stream carries it (the clock read at connect); on a cluster it did not,
// so a first request that landed late ran although its turn had already failed.
describe('RedisStreamsClient on a Redis Cluster: sendBy of the first request to a stream', () => {
  let cluster: PrivateRedisCluster;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('computes hash slots as Redis does', async () => {
    const redis = await cluster.client();
    try {
      for (const key of ['foo', 'a{b}c', '{}x', 'x{}{y}', 'p:rpc:{agent.tax-law.execute}', 'é{ü}'])
        expect(hashSlot(key)).toBe(Number(await redis.cluster('KEYSLOT', key)));
    } finally {
      redis.disconnect();
    }
  });

  it('carries sendBy, on the clock of the master that holds the stream', async () => {
    const keyPrefix = `sendby${Date.now()}:`;
    const client = new RedisStreamsClient({
      redisUrl: cluster.url,
      redisClusterNodes: cluster.seeds,
      keyPrefix,
      timeoutMs: 1000,
    });
    await client.connect();
    const redis = await cluster.client();
    try {
      const [cmd] = client.unwrap<[{ status: string }]>();
      for (let i = 0; i < 100 && cmd.status !== 'ready'; i++)
        await new Promise((r) => setTimeout(r, 50));
      // Its clocks read, as at an app's start: each master's TIME, asked at ready. Waited for (by
      // looking, which reads nothing itself): a loaded machine may answer later than any sleep.
      const clocks = (
        client as unknown as {
          nodeClocks: Map<string, { clock: { offsetFloor(): number | undefined } }>;
        }
      ).nodeClocks;
      const read = (port: number) =>
        [...clocks].some(
          ([name, { clock }]) => name.endsWith(`:${port}`) && clock.offsetFloor() !== undefined,
        );
      await appProcesses().waitFor(async () => cluster.ports.every(read), {
        what: "the client's reading of every master's clock",
        timeoutMs: 15_000,
      });
      // Three streams, so that more than one master's is asked first.
      for (const pattern of ['agent.a.execute', 'agent.b.execute', 'agent.c.execute']) {
        const call = lastValueFrom(client.send(pattern, { q: 1 })).catch((e: unknown) => e);
        const key = requestStreamKey(keyPrefix, pattern);
        let entries: [string, string[]][] = [];
        for (let i = 0; i < 100 && !entries.length; i++) {
          entries = (await redis.xrange(key, '-', '+')) as [string, string[]][];
          if (!entries.length) await new Promise((r) => setTimeout(r, 20));
        }
        // The client finds the stream's master by the slot Redis computes for the key.
        expect(hashSlot(key)).toBe(Number(await redis.cluster('KEYSLOT', key)));
        const [id, fields] = entries[0];
        const sendBy = fields[fields.indexOf('sendBy') + 1];
        expect(fields).toContain('sendBy');
        // It landed in time: by that master's clock, before its sendBy.
        expect(entryMs(id)).toBeLessThanOrEqual(Number(sendBy));
        await call; // nobody serves it: TIMEOUT
      }
    } finally {
      await client.close();
      redis.disconnect();
    }
  });
});
