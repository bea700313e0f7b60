import { isCluster, RedisClient } from '@loom/session';
import { Entry } from './redis-streams.entries';
import { CONSUMER_GROUP } from './redis-streams.options';
import { errorMessage, fieldsToRecord } from './redis-streams.util';

type StreamsReply = [key: string, entries: [entryId: string, fields: unknown][]][];

/**
 * Deletes the group's consumers that hold no pending entry and were idle at least ARGV[3] ms:
 * ARGV[2] names one (an instance leaving), or '*' any but ARGV[4] (instances that died). One
 * step, so an entry cannot be delivered to a consumer between the check and the delete (which
 * would drop it from the pending list for good).
 */
const FORGET_CONSUMERS = `
local removed = 0
for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = {}
  for i = 1, #info, 2 do c[info[i]] = info[i + 1] end
  local chosen = (ARGV[2] == '*' and c.name ~= ARGV[4]) or c.name == ARGV[2]
  if chosen and c.pending == 0 and c.idle >= tonumber(ARGV[3]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], c.name)
    removed = removed + 1
  end
end
return removed
`;

/** The most XAUTOCLAIM calls of one claimIdle (each looks at up to 10 × count pending entries). */
const CLAIM_STEPS = 10;

/** The consumer-group commands of the server. */
export class ConsumerGroup {
  /** Per stream: where the next XAUTOCLAIM scan of the pending list starts. */
  private readonly claimCursors = new Map<string, string>();

  constructor(
    private readonly consumer: string,
    /** stream key -> pattern */
    private readonly streams: Map<string, string>,
  ) {}

  /** `XGROUP CREATE key workers 0 MKSTREAM` for every stream; an existing group is fine. */
  async create(cmd: RedisClient): Promise<void> {
    for (const key of this.streams.keys()) {
      try {
        await cmd.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
      } catch (err) {
        if (!errorMessage(err).startsWith('BUSYGROUP')) throw err;
      }
    }
  }

  /** `XREADGROUP … COUNT count BLOCK blockMs STREAMS …keys >`: entries never delivered before. */
  async readNew(
    reader: RedisClient,
    keys: string[],
    count: number,
    blockMs: number,
  ): Promise<Entry[]> {
    const reply = (await reader.call(
      ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, this.consumer, 'COUNT', count],
      ...['BLOCK', blockMs, 'STREAMS', ...keys, ...keys.map(() => '>')],
    )) as StreamsReply | null;
    return (reply ?? []).flatMap(([key, entries]) =>
      entries.map(([entryId, raw]) => this.entry(key, entryId, raw, 1)),
    );
  }

  /**
   * `XREADGROUP … COUNT count STREAMS …keys 0`: entries already delivered to this consumer and
   * not acknowledged (deleted ones left out). After its reader reconnects: ioredis sends again a
   * read whose answer a reset lost, and that read finds nothing new, while what the lost one
   * delivered sits pending here (see RedisStreamsServer.lookBack). Not blocking: on the command
   * connection. Each with the deliveries Redis counted before this read (XPENDING, one call per
   * stream): the one this run stands for was lost or left unrun, but those before it may have
   * run (progress reported: not judged by startBy) or failed (maxDeliveries).
   */
  async readOwnPending(cmd: RedisClient, keys: string[], count: number): Promise<Entry[]> {
    const reply = (await cmd.call(
      ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, this.consumer, 'COUNT', count],
      ...['STREAMS', ...keys, ...keys.map(() => '0')],
    )) as StreamsReply | null;
    const read = (reply ?? []).filter(([, entries]) => entries.length > 0);
    return (
      await Promise.all(
        read.map(async ([key, entries]) => {
          const first = entries[0][0];
          const last = entries[entries.length - 1][0];
          const rows = (await cmd.call(
            ...['XPENDING', key, CONSUMER_GROUP, first, last, entries.length, this.consumer],
          )) as [string, string, number, number][];
          // XREADGROUP of our history counted one more delivery: this one.
          const counts = new Map(rows.map(([id, , , n]) => [id, Math.max(1, n - 1)]));
          return entries.flatMap(([entryId, raw]) => {
            const deliveries = counts.get(entryId);
            // No row: acknowledged meanwhile.
            return Array.isArray(raw) && deliveries
              ? [this.entry(key, entryId, raw, deliveries)]
              : [];
          });
        }),
      )
    ).flat();
  }

  /**
   * `XAUTOCLAIM` of entries idle at least `minIdleMs` in one stream, with their delivery
   * counts (XPENDING; XAUTOCLAIM has just incremented them). One XAUTOCLAIM looks at no more
   * than 10 × `count` pending entries, so this follows its cursor (up to CLAIM_STEPS calls) and
   * carries it over to the next call: an idle entry behind many busy ones is reached too.
   */
  async claimIdle(
    cmd: RedisClient,
    key: string,
    minIdleMs: number,
    count: number,
  ): Promise<Entry[]> {
    const entries: [string, unknown][] = [];
    let cursor = this.claimCursors.get(key) ?? '0-0';
    for (let step = 0; step < CLAIM_STEPS && entries.length < count; step++) {
      const [next, claimed] = (await cmd.call(
        ...['XAUTOCLAIM', key, CONSUMER_GROUP, this.consumer, minIdleMs, cursor],
        ...['COUNT', count - entries.length],
      )) as [string, ([string, unknown] | null)[]];
      entries.push(...claimed.filter((e): e is [string, unknown] => Array.isArray(e)));
      const wrapped = next === '0-0';
      cursor = next;
      if (wrapped) break; // the whole list was looked at: start over next time
    }
    this.claimCursors.set(key, cursor);
    if (entries.length === 0) return [];
    const pipeline = cmd.pipeline();
    for (const [id] of entries) pipeline.call('XPENDING', key, CONSUMER_GROUP, id, id, 1);
    const pending = (await pipeline.exec()) ?? [];
    return entries.flatMap(([entryId, raw], i) => {
      const row = (pending[i]?.[1] as [string, string, number, number][] | undefined)?.[0];
      return row ? [this.entry(key, entryId, raw, row[3])] : []; // no row: acked meanwhile
    });
  }

  /**
   * `XCLAIM … 0 ids JUSTID` to ourselves: resets idle time, not the delivery count. One
   * pipeline; on a cluster one call per stream (a pipeline there cannot span their slots).
   */
  async touch(cmd: RedisClient, entries: Entry[]): Promise<void> {
    const byKey = new Map<string, string[]>();
    for (const { key, entryId } of entries) byKey.set(key, [...(byKey.get(key) ?? []), entryId]);
    if (byKey.size === 0) return;
    const claim = (key: string, ids: string[]) =>
      ['XCLAIM', key, CONSUMER_GROUP, this.consumer, 0, ...ids, 'JUSTID'] as const;
    if (isCluster(cmd)) {
      await Promise.all([...byKey].map(([key, ids]) => cmd.call(...claim(key, ids))));
      return;
    }
    const pipeline = cmd.pipeline();
    for (const [key, ids] of byKey) pipeline.call(...claim(key, ids));
    await pipeline.exec();
  }

  /** This instance leaves every group, where it holds nothing (what it holds stays reclaimable). */
  async leave(cmd: RedisClient): Promise<void> {
    for (const key of this.streams.keys())
      await cmd.eval(FORGET_CONSUMERS, 1, key, CONSUMER_GROUP, this.consumer, 0, '');
  }

  /**
   * Forgets consumers of instances gone for `idleMs` that hold nothing (their entries were
   * reclaimed): each start is a new consumer, so without this the groups grow with every
   * deploy. A live consumer is never that idle: its XREADGROUP refreshes it every blockMs.
   */
  async forgetIdle(cmd: RedisClient, idleMs: number): Promise<number> {
    let removed = 0;
    for (const key of this.streams.keys())
      removed += Number(
        await cmd.eval(FORGET_CONSUMERS, 1, key, CONSUMER_GROUP, '*', idleMs, this.consumer),
      );
    return removed;
  }

  private entry(key: string, entryId: string, raw: unknown, deliveryCount: number): Entry {
    const pattern = this.streams.get(key) ?? '';
    return { key, pattern, entryId, fields: fieldsToRecord(raw), deliveryCount };
  }
}
