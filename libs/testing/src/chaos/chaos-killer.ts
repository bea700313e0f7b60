import { sleep } from '../private-redis';
import { ChaosCluster } from './chaos-cluster';
import { SeededRandom } from './random';

export interface KillCounts {
  sigkill: Record<string, number>;
  sigterm: Record<string, number>;
  sigstop: Record<string, number>;
  redisPauses: number;
  redisRestarts: number;
  /** The audit's own MySQL server stopped (SIGKILL or SIGTERM) and started again. */
  mysqlStops: number;
}

/**
 * Every few hundred ms to a few seconds: SIGKILL a random process and start it again (most
 * often), SIGTERM one (SIGKILL after 0.5 to 25 s if it still runs), SIGSTOP one for up to 6 s,
 * or SIGSTOP the private redis-server (a random master of a cluster) for up to 4 s, or (rarely)
 * SIGKILL it and start it empty, or stop the audit's own MySQL server (SIGKILL, a crash, or
 * SIGTERM, a clean shutdown) and start it again on its data after 0.5 to 4 s.
 */
export class ChaosKiller {
  readonly counts: KillCounts = {
    sigkill: {},
    sigterm: {},
    sigstop: {},
    redisPauses: 0,
    redisRestarts: 0,
    mysqlStops: 0,
  };
  private running = true;
  private redisDown = false;
  private mysqlDown = false;
  private readonly pending: Array<Promise<void>> = [];

  constructor(
    private readonly cluster: ChaosCluster,
    private readonly rnd: SeededRandom,
    private readonly gapMs: [number, number] = [300, 3000],
  ) {}

  async run(): Promise<void> {
    while (this.running) {
      await sleep(this.rnd.int(...this.gapMs));
      if (!this.running) break;
      const roll = this.rnd.next();
      const live = this.cluster.slots.filter((s) => s.child && !s.paused && !s.killing);
      if (roll < 0.02) this.pending.push(this.restartRedis(this.rnd.int(0, 1000)));
      else if (roll < 0.08) this.pending.push(this.pauseRedis(this.rnd.int(1000, 4000)));
      else if (roll < 0.25 && live.length)
        this.pending.push(this.pause(this.rnd.pick(live), this.rnd.int(500, 6000)));
      else if (roll < 0.35 && live.length)
        this.pending.push(
          this.terminate(this.rnd.pick(live), this.rnd.int(500, 25_000), this.rnd.int(0, 2000)),
        );
      else if (roll < 0.38)
        this.pending.push(
          this.stopMysql(this.rnd.next() < 0.5 ? 'SIGKILL' : 'SIGTERM', this.rnd.int(500, 4000)),
        );
      else if (live.length)
        this.pending.push(this.kill(this.rnd.pick(live), this.rnd.int(0, 2000)));
    }
    await Promise.all(this.pending);
  }

  /** Stops choosing victims; resolves once every stopped process runs again. */
  stop(): void {
    this.running = false;
  }

  private async kill(slot: ChaosCluster['slots'][number], restartAfterMs: number): Promise<void> {
    this.counts.sigkill[slot.app] = (this.counts.sigkill[slot.app] ?? 0) + 1;
    await this.cluster.kill(slot);
    await sleep(restartAfterMs);
    if (!slot.child) this.cluster.launch(slot);
  }

  private async terminate(
    slot: ChaosCluster['slots'][number],
    killAfterMs: number,
    restartAfterMs: number,
  ): Promise<void> {
    this.counts.sigterm[slot.app] = (this.counts.sigterm[slot.app] ?? 0) + 1;
    await this.cluster.terminate(slot, killAfterMs);
    await sleep(restartAfterMs);
    if (!slot.child) this.cluster.launch(slot);
  }

  private async pause(slot: ChaosCluster['slots'][number], forMs: number): Promise<void> {
    this.counts.sigstop[slot.app] = (this.counts.sigstop[slot.app] ?? 0) + 1;
    this.cluster.pause(slot);
    await sleep(forMs);
    this.cluster.resume(slot);
  }

  /**
   * SIGKILL of the redis-server (one master), started again empty: a FLUSHALL, or a failover
   * that lost it all.
   */
  private async restartRedis(afterMs: number): Promise<void> {
    if (this.redisDown) return;
    this.redisDown = true;
    this.counts.redisRestarts += 1;
    try {
      await this.cluster.redis.restartOne(this.rnd, afterMs);
    } finally {
      this.redisDown = false;
    }
  }

  /** The audit's own MySQL server (never the shared one) stopped, and started again on its data. */
  private async stopMysql(signal: 'SIGKILL' | 'SIGTERM', forMs: number): Promise<void> {
    if (this.mysqlDown) return;
    this.mysqlDown = true;
    this.counts.mysqlStops += 1;
    try {
      await this.cluster.stopMysql(signal);
      await sleep(forMs);
      await this.cluster.startMysql();
    } finally {
      this.mysqlDown = false;
    }
  }

  private async pauseRedis(forMs: number): Promise<void> {
    this.counts.redisPauses += 1;
    await this.cluster.redis.pauseOne(this.rnd, forMs);
  }
}
