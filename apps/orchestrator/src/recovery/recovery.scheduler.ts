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
import { SessionSweeper } from './session-sweeper.service';
import { TaskRecovery } from './task-recovery.service';

/** How often the sweeper runs (each run is bounded; one replica at a time). */
export const SWEEP_INTERVAL_MS = 10 * 60_000;

/**
 * @nestjs/schedule intervals for the recovery scan (RECOVERY_INTERVAL_MS, and once at start)
 * and the sweeper. A run never overlaps the previous one; each runs inside `cls.run()`
 * (runWithMdc) so its log lines carry a correlation id, and each recovered task its own ids.
 */
@Injectable()
export class RecoveryScheduler
  implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown
{
  private readonly log = new Logger('RecoveryScheduler');
  private readonly busy = new Set<string>();
  private stopped = false;

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly registry: SchedulerRegistry,
    private readonly recovery: TaskRecovery,
    private readonly sweeper: SessionSweeper,
  ) {}

  onApplicationBootstrap(): void {
    const every = (name: string, ms: number, job: () => Promise<unknown>) => {
      const timer = setInterval(() => void this.once(name, job), ms);
      timer.unref();
      this.registry.addInterval(name, timer);
    };
    every('task-recovery', this.env.RECOVERY_INTERVAL_MS, () => this.recovery.scan());
    every('session-sweeper', SWEEP_INTERVAL_MS, () => this.sweeper.sweep());
    void this.once('task-recovery', () => this.recovery.scan());
  }

  /** A stopping replica starts no recovery: what it could not finish would only be handed on. */
  beforeApplicationShutdown(): void {
    this.stopped = true;
  }

  onApplicationShutdown(): void {
    this.stopped = true;
  }

  /** Runs `job` unless the previous run of `name` is still going. */
  private async once(name: string, job: () => Promise<unknown>): Promise<void> {
    if (this.stopped || this.busy.has(name)) return;
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
  }
}
