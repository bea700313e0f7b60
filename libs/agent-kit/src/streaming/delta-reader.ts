import { sleep, unlessAborted } from '../transport/redis-streams.util';
import { DeltaSubscriber, StreamEntry } from './delta-subscriber';

/** Streams one XREAD names at most: more subscribers take more readers, or more commands. */
export const MAX_KEYS_PER_READ = 1000;
/** Entries one XREAD takes of each stream (what is left comes in the next round). */
export const ENTRIES_PER_READ = 100;
/** stop() resolves within this while Redis is away, as the reader of one execution used to. */
const STOP_WAIT_MS = 4000;
const RETRY_MS = 100;
const MAX_RETRY_MS = 2000;

/** What a round brings: the reads that settled, each with the round it was sent in. */
export interface DeltaRound {
  settled: Map<DeltaSubscriber, number>;
  /** New entries of settled reads. */
  entries: Map<DeltaSubscriber, StreamEntry[]>;
  /** Settled reads that failed. */
  failed: Set<DeltaSubscriber>;
}

export function emptyRound(): DeltaRound {
  return { settled: new Map(), entries: new Map(), failed: new Set() };
}

/**
 * Reads the delta streams of many subscribers in rounds. A stream is read by one command at a
 * time, and read again only once what that command brought has been delivered: each entry is
 * delivered once, in order. A round after a subscriber's stop() does not block; a read sent
 * after stop() that finds nothing more in its stream (or cannot read it: Redis away) finishes
 * the subscriber: deletes its key, then resolves its stop(). A round whose reads all failed is
 * tried again after a growing pause (up to 2 s).
 */
export abstract class DeltaReader {
  protected readonly subscribers = new Set<DeltaSubscriber>();
  private readonly closing = new AbortController();
  private round = 0;
  private loop: Promise<void> | null = null;
  private wakeIdle: (() => void) | null = null;

  get size(): number {
    return this.subscribers.size;
  }

  /** Whether a subscriber of `key` may join this reader. */
  abstract accepts(key: string): boolean;

  add(subscriber: DeltaSubscriber): void {
    this.subscribers.add(subscriber);
    this.changed();
    this.loop ??= this.run();
  }

  /** Resolves once `subscriber` has had its stream's last delta and its key is deleted. */
  async stop(subscriber: DeltaSubscriber): Promise<void> {
    if (!this.subscribers.has(subscriber) || subscriber.stopFrom !== Infinity)
      return subscriber.done;
    subscriber.stopFrom = this.round + 1;
    this.changed();
    const giveUp = setTimeout(() => this.finish([subscriber], false), STOP_WAIT_MS);
    await subscriber.done;
    clearTimeout(giveUp);
  }

  /** Ends the loop and the connection; pending stop()s resolve at once. */
  async close(): Promise<void> {
    this.closing.abort();
    this.wakeIdle?.();
    this.subscribers.forEach((s) => s.close());
    this.subscribers.clear();
    await this.disconnect();
  }

  /**
   * Reads `subscribers` (each key named once per command), blocking when `block`; returns what
   * settled, which may include reads of earlier rounds. Throws when nothing could be read.
   */
  protected abstract read(
    subscribers: DeltaSubscriber[],
    block: boolean,
    round: number,
  ): Promise<DeltaRound>;

  /** How long to wait after a round that started at `started` (ms since the epoch). */
  protected abstract pace(started: number): number;

  /** A subscriber joined or is stopping: a blocked round must end soon. */
  protected abstract onChange(): void;

  protected abstract delete(keys: string[]): Promise<unknown>;

  protected abstract disconnect(): Promise<void>;

  private changed(): void {
    this.wakeIdle?.();
    this.onChange();
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.closing.signal.aborted) {
      if (this.subscribers.size === 0) {
        await new Promise<void>((resolve) => (this.wakeIdle = resolve));
        this.wakeIdle = null;
        continue;
      }
      const round = ++this.round;
      const started = Date.now();
      const subscribers = [...this.subscribers];
      const draining = subscribers.some((s) => s.stopFrom <= round);
      const read = await unlessAborted(
        this.read(subscribers, !draining, round).catch(() => failed(subscribers, round)),
        this.closing.signal,
      );
      if (!read) return;
      read.entries.forEach((entries, subscriber) => subscriber.deliver(entries));
      // A stopped execution has answered: everything it published was in its stream when a
      // read sent after stop() was.
      const ended = [...read.settled].filter(
        ([s, sent]) => sent >= s.stopFrom && !read.entries.has(s),
      );
      this.finish(
        ended.map(([s]) => s),
        true,
      );
      const allFailed = read.failed.size > 0 && read.failed.size === read.settled.size;
      failures = allFailed ? failures + 1 : 0;
      const pause = failures
        ? Math.min(RETRY_MS * 2 ** (failures - 1), MAX_RETRY_MS)
        : this.pace(started);
      if (pause > 0) await sleep(pause, this.closing.signal);
    }
  }

  /**
   * Deletes the streams of `subscribers` (read to the end, the reply text goes now, not a minute
   * later: a conversation deleted meanwhile keeps nothing in Redis) and resolves their stop():
   * after the DEL, or at once when giving up on an unreachable Redis.
   */
  private finish(subscribers: DeltaSubscriber[], afterDelete: boolean): void {
    const gone = subscribers.filter((s) => this.subscribers.delete(s));
    const deleted = gone.length
      ? this.delete(gone.map((s) => s.key)).catch(() => undefined)
      : Promise.resolve();
    if (afterDelete) void deleted.then(() => gone.forEach((s) => s.close()));
    else subscribers.forEach((s) => s.close());
  }
}

function failed(subscribers: DeltaSubscriber[], round: number): DeltaRound {
  const out = emptyRound();
  subscribers.forEach((s) => (out.settled.set(s, round), out.failed.add(s)));
  return out;
}
