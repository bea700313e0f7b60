import {
  BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  OnApplicationShutdown,
} from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { newId } from '@loom/session';
import { runWithMdc } from '@loom/observability';
import { RecoverySignal } from './recovery-signal';
import { SessionSweeper } from './session-sweeper.service';
import { TaskRecovery } from './task-recovery.service';

/** How often the sweeper runs (each run is bounded; one replica at a time). */
export const SWEEP_INTERVAL_MS = 10 * 60_000;
/** A signalled scan runs this long after the tasks are due: their leases have surely ended. */
export const SIGNALLED_SCAN_DELAY_MS = 100;
/** Signals due within one slot share a scan. */
export const SIGNAL_SLOT_MS = 500;
/** Signalled scans waiting at most at a time; more are left to the interval. */
export const MAX_SIGNALLED_SCANS = 16;

/**
 * @nestjs/schedule intervals for the recovery scan (RECOVERY_INTERVAL_MS, and once at start)
 * and the sweeper. A stopping replica's signal (RecoverySignal) adds a scan when its tasks
 * become due. A run never overlaps the previous one (a signalled scan that finds one running
 * runs once more after it); each runs inside `cls.run()` (runWithMdc) so its log lines carry a
 * correlation id, and each recovered task its own ids.
 */
@Injectable()
export class RecoveryScheduler
  implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown
{
  private readonly log = new Logger('RecoveryScheduler');
  private readonly busy = new Set<string>();
  private readonly again = new Set<string>();
  /** Signalled scans waiting, by the slot (epoch ms) they run at. */
  private readonly signalled = new Map<number, NodeJS.Timeout>();
  private stopped = false;

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly registry: SchedulerRegistry,
    private readonly recovery: TaskRecovery,
    private readonly sweeper: SessionSweeper,
    private readonly signal: RecoverySignal,
  ) {}

  onApplicationBootstrap(): void {
    const every = (name: string, ms: number, job: () => Promise<unknown>) => {
      const timer = setInterval(() => void this.once(name, job), ms);
      timer.unref();
      this.registry.addInterval(name, timer);
    };
    every('task-recovery', this.env.RECOVERY_INTERVAL_MS, () => this.startScan());
    every('session-sweeper', SWEEP_INTERVAL_MS, () => this.sweeper.sweep());
    void this.once('task-recovery', () => this.startScan());
    this.signal.listen(({ from, inMs }) =>
      this.scanIn(inMs + SIGNALLED_SCAN_DELAY_MS, `${from} is stopping`),
    );
  }

  /**
   * A recovery scan `ms` from now (tasks become due then), besides the interval's. Signals due
   * within the same SIGNAL_SLOT_MS share one scan, and at most MAX_SIGNALLED_SCANS wait at a
   * time: replicas stopping together, or a flood on the channel, cost a few scans, not one each.
   */
  scanIn(ms: number, reason: string): void {
    if (this.stopped) return;
    const slot = Math.ceil((Date.now() + ms) / SIGNAL_SLOT_MS) * SIGNAL_SLOT_MS;
    if (this.signalled.has(slot)) return;
    if (this.signalled.size >= MAX_SIGNALLED_SCANS) {
      this.log.warn(
        `${reason}: ${MAX_SIGNALLED_SCANS} signalled scans already wait; left to the interval`,
      );
      return;
    }
    this.log.log(`${reason}: recovery scan in ${slot - Date.now()} ms`);
    const timer = setTimeout(() => {
      this.signalled.delete(slot);
      void this.once('task-recovery', () => this.startScan(), { rerunIfBusy: true });
    }, slot - Date.now());
    timer.unref();
    this.signalled.set(slot, timer);
  }

  /**
   * A scan's part the next one waits for: reading the index and starting the recoveries of due
   * tasks. Those run on, each as long as its agents still work, beside the scans that follow.
   */
  private async startScan(): Promise<{ indexed: number; due: number }> {
    const { indexed, due } = await this.recovery.start();
    return { indexed, due };
  }

  /** A stopping replica starts no recovery: what it could not finish would only be handed on. */
  beforeApplicationShutdown(): void {
    this.stop();
  }

  onApplicationShutdown(): void {
    this.stop();
  }

  private stop(): void {
    this.stopped = true;
    for (const timer of this.signalled.values()) clearTimeout(timer);
    this.signalled.clear();
  }

  /**
   * Runs `job` unless the previous run of `name` is still going; with `rerunIfBusy`, it then runs
   * once more after that one (a scan that started before the signalled tasks were due).
   */
  private async once(
    name: string,
    job: () => Promise<unknown>,
    { rerunIfBusy = false }: { rerunIfBusy?: boolean } = {},
  ): Promise<void> {
    if (this.stopped) return;
    if (this.busy.has(name)) {
      if (rerunIfBusy) this.again.add(name);
      return;
    }
    this.busy.add(name);
    try {
      // The failure is logged inside the run too, so its line carries the run's correlation id.
      await runWithMdc({ correlationId: `${name}-${newId('r')}` }, async () => {
        try {
          const report = await job();
          this.log.debug(`${name}: ${JSON.stringify(report)}`);
        } catch (err) {
          this.log.warn(`${name} failed: ${(err as Error).message}`);
        }
      });
    } finally {
      this.busy.delete(name);
    }
    if (this.again.delete(name)) await this.once(name, job);
  }
}
