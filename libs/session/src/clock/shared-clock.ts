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
    // Taken halfway through the round trip: off by half of it at most.
    this.base = {
      server: Number(seconds) * 1000 + Number(micros) / 1000,
      mono: (sent + received) / 2,
    };
  }
}

function name(node: { options: { host?: string; port?: number } }): string {
  return `${node.options.host}:${node.options.port}`;
}
