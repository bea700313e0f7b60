import { performance } from 'perf_hooks';

/** A lower bound of the offset between Redis's clock and ours is trusted this long (ms). */
const TRUSTED_MS = 60_000;

/** The epoch ms of a stream entry id (`<ms>-<seq>`): Redis's clock when it added the entry. */
export function entryMs(entryId: string): number {
  return Number(entryId.slice(0, entryId.indexOf('-')));
}

/**
 * The `sendBy` of a request: on Redis's clock, the time after which an XADD that lands has
 * outlived its command time-out, so its caller was told UNAVAILABLE. Such an entry is skipped
 * by the agent (and a call whose XADD answers later than that fails at once), however it got
 * there: ioredis sends again the commands a dropped connection left unanswered and those queued
 * while it was away, and bytes held up in the network still arrive.
 *
 * No clocks are compared across hosts: each XADD's entry id tells Redis's time when it ran,
 * which happened before its answer came back, so `id - answeredAt` is a lower bound of how far
 * Redis's clock is ahead of our monotonic one. `sendBy` is that bound plus the command's sending
 * time and time-out: an XADD that ran after its caller gave up ran past it. Kept per stream
 * (a cluster's streams live on different hosts). Before an XADD to a stream was answered, the
 * bound `fallback` gives for the stream, if any: the clock of the server holding it read with
 * TIME (the same reasoning; at connect on a standalone Redis, per master on a cluster), so that
 * a client's first request to each stream is covered too.
 */
export class SendBy {
  private readonly offsets = new Map<string, { ms: number; at: number }>();

  constructor(private readonly fallback: (key: string) => number | undefined = () => undefined) {}

  /** `sendBy` for an XADD to `key` sent now with `timeoutMs`, or undefined while unknown. */
  of(key: string, timeoutMs: number, sentAt = performance.now()): number | undefined {
    const offset = this.offsets.get(key)?.ms ?? this.fallback(key);
    if (offset === undefined) return undefined;
    return Math.floor(sentAt + timeoutMs + offset) - 1;
  }

  /** Learns from an XADD to `key` that `entryId` answered (now). */
  observe(key: string, entryId: string, answeredAt = performance.now()): void {
    const ms = entryMs(entryId) - answeredAt;
    if (!Number.isFinite(ms)) return;
    const known = this.offsets.get(key);
    if (!known || ms >= known.ms || answeredAt - known.at > TRUSTED_MS)
      this.offsets.set(key, { ms, at: answeredAt });
  }
}
