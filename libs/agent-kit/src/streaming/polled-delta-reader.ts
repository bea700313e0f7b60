import type { Cluster } from 'ioredis';
import { duplicateRedis } from '@loom/session';
import { dropConnectionAndWait } from '../transport/redis-streams.util';
import {
  DeltaReader,
  DeltaRound,
  emptyRound,
  ENTRIES_PER_READ,
  MAX_KEYS_PER_READ,
} from './delta-reader';
import { DeltaSubscriber, entriesBySubscriber, XReadReply } from './delta-subscriber';

export interface PolledDeltaReaderOptions {
  /** A round starts at most this often. */
  pollMs: number;
  connectionName: string;
}

/** How long a round waits for its reads; a slower one (its master away) is delivered later. */
const ROUND_WAIT_MS = 100;

/**
 * Redis Cluster: one Cluster client, so one connection per master it reads from, whatever the
 * number of subscribers. A cluster refuses an XREAD over keys of different slots, even slots of
 * one master (CROSSSLOT), and a blocked XREAD holds its connection: blocking, it would take one
 * connection per conversation. So it polls instead: every `pollMs`, one XREAD (without BLOCK)
 * per conversation (its hash tag, its slot), all sent at once, each routed to its slot's master
 * (MOVED, ASK and failovers followed by ioredis; a slot that moves costs its reads a round). A round waits ROUND_WAIT_MS at most: a read
 * still out then (its master away or stopped) keeps its subscribers out of later rounds until it
 * settles, and the others go on.
 */
export class PolledDeltaReader extends DeltaReader {
  private readonly connection: Cluster;
  /** Subscribers with a read out, or one settled and not yet handed to the loop. */
  private readonly busy = new Set<DeltaSubscriber>();
  private settled = emptyRound();

  constructor(
    cluster: Cluster,
    private readonly options: PolledDeltaReaderOptions,
  ) {
    super();
    // Auto-pipelined: a round's XREADs go to each master as one pipeline. Sent one by one they
    // cost the masters ~8 times the CPU (bench/deltas.bench.ts: 342 vs 40 ms a second with
    // 1,000 idle subscriptions; their own connections, before, 33).
    this.connection = duplicateRedis(cluster, {
      connectionName: options.connectionName,
      enableOfflineQueue: true,
      enableAutoPipelining: true,
      commandTimeout: 2000,
    }) as Cluster;
    this.connection.on('error', () => undefined);
  }

  accepts(): boolean {
    return true;
  }

  protected async read(
    subscribers: DeltaSubscriber[],
    _block: boolean,
    round: number,
  ): Promise<DeltaRound> {
    const reads = batches(subscribers.filter((s) => !this.busy.has(s))).map((batch) =>
      this.readBatch(batch, round),
    );
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(reads),
      new Promise((resolve) => (timer = setTimeout(resolve, ROUND_WAIT_MS))),
    ]);
    clearTimeout(timer);
    const out = this.settled;
    this.settled = emptyRound();
    out.settled.forEach((_, s) => this.busy.delete(s));
    return out;
  }

  private async readBatch(batch: DeltaSubscriber[], round: number): Promise<void> {
    batch.forEach((s) => this.busy.add(s));
    try {
      const reply = (await this.connection.call(
        'XREAD',
        ...['COUNT', ENTRIES_PER_READ, 'STREAMS'],
        ...batch.map((s) => s.key),
        ...batch.map((s) => s.lastId),
      )) as XReadReply;
      entriesBySubscriber(batch, reply).forEach((entries, s) =>
        this.settled.entries.set(s, entries),
      );
    } catch {
      // Its next round reads it again (after a slot moved, from where the client learnt it is).
      batch.forEach((s) => this.settled.failed.add(s));
    }
    batch.forEach((s) => this.settled.settled.set(s, round));
  }

  protected pace(started: number): number {
    return started + this.options.pollMs - Date.now();
  }

  protected onChange(): void {
    // Nothing blocks: the next round, within pollMs, reads the new subscriber or drains a stop.
  }

  protected delete(keys: string[]): Promise<unknown> {
    return Promise.all(keys.map((key) => this.connection.del(key)));
  }

  protected async disconnect(): Promise<void> {
    // Not disconnect(): the socketTimeout of a read still out would hold the process open.
    await dropConnectionAndWait(this.connection);
  }
}

/** One XREAD per hash tag (one slot), each naming a key once and at most MAX_KEYS_PER_READ. */
function batches(subscribers: DeltaSubscriber[]): DeltaSubscriber[][] {
  const byTag = new Map<string, DeltaSubscriber[][]>();
  for (const s of subscribers) {
    const tagged = byTag.get(s.tag) ?? [];
    byTag.set(s.tag, tagged);
    const fits = (b: DeltaSubscriber[]) =>
      b.length < MAX_KEYS_PER_READ && !b.some((o) => o.key === s.key);
    const batch = tagged.find(fits);
    if (batch) batch.push(s);
    else tagged.push([s]);
  }
  return [...byTag.values()].flat();
}
