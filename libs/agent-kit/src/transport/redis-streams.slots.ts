import { sleep } from './redis-streams.util';

/**
 * Concurrency limit of one server: at most `size` tasks run; tasks beyond it wait in a local
 * backlog (they were already delivered to this consumer), and the reader waits for a free slot.
 */
export class Slots {
  private active = 0;
  private backlog: (() => void)[] = [];
  private waiters: (() => void)[] = [];
  private onIdle?: () => void;

  constructor(private readonly size: number) {}

  /** How many more entries the reader may fetch now. */
  free(): number {
    return Math.max(0, this.size - this.active - this.backlog.length);
  }

  /** Resolves once `free() > 0` (or at once after `wakeAll`). */
  wait(): Promise<void> {
    if (this.free() > 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Runs `task` in a slot (now or when one frees up); `release` may be called before it ends. */
  run(task: (release: () => void) => Promise<void>): void {
    const start = (): void => {
      this.active++;
      let released = false;
      const release = (): void => {
        if (released) return;
        released = true;
        this.active--;
        (this.backlog.shift() ?? this.waiters.shift())?.();
        if (this.active === 0) this.onIdle?.();
      };
      void task(release).then(release, release);
    };
    if (this.active < this.size) start();
    else this.backlog.push(start);
  }

  /** Wakes the reader and drops the backlog (those entries stay pending in Redis). */
  wakeAll(): void {
    this.waiters.splice(0).forEach((wake) => wake());
    this.backlog = [];
  }

  /** Resolves when no task holds a slot, or after `maxMs`. */
  async drain(maxMs: number): Promise<void> {
    if (this.active === 0) return;
    const idle = new Promise<void>((resolve) => (this.onIdle = resolve));
    await Promise.race([idle, sleep(maxMs)]);
    this.onIdle = undefined;
  }
}
