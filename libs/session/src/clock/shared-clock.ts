import { performance } from 'perf_hooks';
import { masters, RedisClient } from '../redis/redis-client';

/** How often the clock reads Redis's time again (drift of this host's monotonic clock). */
const RESYNC_MS = 10_000;

/**
 * The time every process of a deployment agrees on: Redis's (TIME), read now and then and
 * carried forward on this host's monotonic clock, so that a time one host writes (a lease's
 * end, a request's deadline) means the same on the host that reads it, whatever either host's
 * wall clock says (skewed by minutes, or stepped by NTP or a VM resume). Without Redis (the
 * embedded profile: one process), or before Redis ever answered, it is this host's Date.now().
 */
export class SharedClock {
  private base?: { server: number; mono: number };
  /** `server - received` of the last reading: see offsetFloor(). */
  private floor?: number;
  private syncing?: Promise<void>;

  constructor(private readonly redis: RedisClient | null) {}

  /** Epoch milliseconds on the shared clock. */
  now(): number {
    const base = this.base;
    if (!base) {
      void this.sync();
      return Date.now();
    }
    const mono = performance.now();
    if (mono - base.mono >= RESYNC_MS) void this.sync();
    return base.server + (mono - base.mono);
  }

  /**
   * A lower bound of how far Redis's clock is ahead of this host's monotonic one
   * (`performance.now()`), from the last reading, or undefined before one: Redis read its clock
   * before its answer arrived. Exact but for that round trip, where now() may be off by half of
   * it either way.
   */
  offsetFloor(): number | undefined {
    return this.floor;
  }

  /** Reads Redis's time (once at a time); a failure keeps the last reading. */
  sync(): Promise<void> {
    if (!this.redis) return Promise.resolve();
    this.syncing ??= this.read(this.redis)
      .catch(() => undefined)
      .finally(() => (this.syncing = undefined));
    return this.syncing;
  }

  private async read(redis: RedisClient): Promise<void> {
    // On a cluster, one master's clock, the same one each time.
    const node = masters(redis).sort((a, b) => name(a).localeCompare(name(b)))[0] ?? redis;
    const sent = performance.now();
    const [seconds, micros] = (await node.call('TIME')) as [string, string];
    const received = performance.now();
    const server = Number(seconds) * 1000 + Number(micros) / 1000;
    // Taken halfway through the round trip: off by half of it at most.
    this.base = { server, mono: (sent + received) / 2 };
    this.floor = server - received;
  }
}

function name(node: { options: { host?: string; port?: number } }): string {
  return `${node.options.host}:${node.options.port}`;
}
