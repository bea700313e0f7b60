import Redis from 'ioredis';
import { Entry } from './redis-streams.entries';
import { CONSUMER_GROUP } from './redis-streams.options';
import { errorMessage, fieldsToRecord } from './redis-streams.util';

type StreamsReply = [key: string, entries: [entryId: string, fields: unknown][]][];

/** The consumer-group commands of the server, one function per round trip. */
export class ConsumerGroup {
  constructor(
    private readonly consumer: string,
    /** stream key -> pattern */
    private readonly streams: Map<string, string>,
  ) {}

  /** `XGROUP CREATE key workers 0 MKSTREAM` for every stream; an existing group is fine. */
  async create(cmd: Redis): Promise<void> {
    for (const key of this.streams.keys()) {
      try {
        await cmd.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
      } catch (err) {
        if (!errorMessage(err).startsWith('BUSYGROUP')) throw err;
      }
    }
  }

  /** `XREADGROUP … COUNT count BLOCK blockMs STREAMS …keys >`: entries never delivered before. */
  async readNew(reader: Redis, count: number, blockMs: number): Promise<Entry[]> {
    const keys = [...this.streams.keys()];
    const reply = (await reader.call(
      ...['XREADGROUP', 'GROUP', CONSUMER_GROUP, this.consumer, 'COUNT', count],
      ...['BLOCK', blockMs, 'STREAMS', ...keys, ...keys.map(() => '>')],
    )) as StreamsReply | null;
    return (reply ?? []).flatMap(([key, entries]) =>
      entries.map(([entryId, raw]) => this.entry(key, entryId, raw, 1)),
    );
  }

  /**
   * `XAUTOCLAIM` of entries idle at least `minIdleMs` in one stream, with their delivery
   * counts (XPENDING; XAUTOCLAIM has just incremented them).
   */
  async claimIdle(cmd: Redis, key: string, minIdleMs: number, count: number): Promise<Entry[]> {
    const [, claimed] = (await cmd.call(
      ...['XAUTOCLAIM', key, CONSUMER_GROUP, this.consumer, minIdleMs, '0-0', 'COUNT', count],
    )) as [string, ([string, unknown] | null)[]];
    const entries = claimed.filter((e): e is [string, unknown] => Array.isArray(e));
    if (entries.length === 0) return [];
    const pipeline = cmd.pipeline();
    for (const [id] of entries) pipeline.call('XPENDING', key, CONSUMER_GROUP, id, id, 1);
    const pending = (await pipeline.exec()) ?? [];
    return entries.flatMap(([entryId, raw], i) => {
      const row = (pending[i]?.[1] as [string, string, number, number][] | undefined)?.[0];
      return row ? [this.entry(key, entryId, raw, row[3])] : []; // no row: acked meanwhile
    });
  }

  /** `XCLAIM … 0 ids JUSTID` to ourselves: resets idle time, not the delivery count. */
  async touch(cmd: Redis, entries: Entry[]): Promise<void> {
    const byKey = new Map<string, string[]>();
    for (const { key, entryId } of entries) byKey.set(key, [...(byKey.get(key) ?? []), entryId]);
    if (byKey.size === 0) return;
    const pipeline = cmd.pipeline();
    for (const [key, ids] of byKey) {
      pipeline.call('XCLAIM', key, CONSUMER_GROUP, this.consumer, 0, ...ids, 'JUSTID');
    }
    await pipeline.exec();
  }

  private entry(key: string, entryId: string, raw: unknown, deliveryCount: number): Entry {
    const pattern = this.streams.get(key) ?? '';
    return { key, pattern, entryId, fields: fieldsToRecord(raw), deliveryCount };
  }
}
