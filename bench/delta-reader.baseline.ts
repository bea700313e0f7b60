/**
 * The reader DeltaChannel.subscribe() had before its shared readers: a connection of its own per
 * subscription (duplicateRedis: on a cluster, a whole Cluster client), XREAD BLOCK 500 ms on
 * that one stream, closed by stop(). Kept as it was (commit 7440ad6), with a connection name
 * for CLIENT LIST.
 */
import { duplicateRedis, RedisClient } from '@loom/session';

const BLOCK_MS = 500;

export function subscribePerConnection(
  redis: RedisClient,
  key: string,
  onDelta: (text: string) => void,
  connectionName: string,
): { stop(): Promise<void> } {
  const reader = duplicateRedis(redis, {
    enableOfflineQueue: true,
    commandTimeout: BLOCK_MS * 4,
    connectionName,
  });
  reader.on('error', () => undefined);
  let stopped = false;
  let lastId = '0';
  const drain = async (block: boolean) => {
    const args: Array<string | number> = block ? ['BLOCK', BLOCK_MS] : [];
    const res = (await (reader as any).xread(...args, 'STREAMS', key, lastId)) as Array<
      [string, Array<[string, string[]]>]
    > | null;
    for (const [id, fields] of res?.[0]?.[1] ?? []) {
      lastId = id;
      onDelta(fields[1]);
    }
    return (res?.[0]?.[1]?.length ?? 0) > 0;
  };
  const loop = (async () => {
    while (!stopped) await drain(true).catch(() => new Promise((r) => setTimeout(r, 100)));
    while (await drain(false).catch(() => false));
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      await reader.del(key).catch(() => undefined);
      reader.disconnect();
    },
  };
}
