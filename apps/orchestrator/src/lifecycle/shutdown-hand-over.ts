import { performance } from 'perf_hooks';
import { BeforeApplicationShutdown, Inject, Injectable, Logger } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { Server } from 'http';
import { LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { RecoverySignal } from '../recovery/recovery-signal';
import { TaskLeases } from '../turn/task-run';

/**
 * How much longer than the hand-over a capped lease runs: a replica takes a task over only once
 * its lease has expired, so this is the time the hand-over's own writes have, and how long the
 * answers of handed-over turns are waited for.
 */
export const HAND_OVER_MARGIN_MS = 2000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/**
 * SIGTERM (docs/recovery.md, "Stopping a process"): stop taking connections, cap every lease of
 * this process at SHUTDOWN_HANDOVER_MS + margin from now (a kill before the hand-over then leaves
 * tasks another replica recovers at that time, not after TASK_LEASE_MS), let running turns
 * finish until SHUTDOWN_HANDOVER_MS, hand the rest over (their callers get 503 UNAVAILABLE and
 * retry with their Idempotency-Key), and wait for every request to be answered before the
 * stores close. The other replicas are told when the tasks become due (at the cap, and again
 * at once when some were handed over), so one of them resumes them then, not at its next scan.
 */
@Injectable()
export class ShutdownHandOver implements BeforeApplicationShutdown {
  private readonly log = new Logger('Shutdown');

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly leases: TaskLeases,
    private readonly http: HttpAdapterHost,
    private readonly signal: RecoverySignal,
  ) {}

  async beforeApplicationShutdown(): Promise<void> {
    const deadline = performance.now() + this.env.SHUTDOWN_HANDOVER_MS;
    const server = this.http.httpAdapter?.getHttpServer() as Server | undefined;
    let allAnswered = !server?.listening;
    // Closes the listener now; calls back once every open request has been answered.
    const answered = new Promise<void>((resolve) => {
      if (allAnswered) return resolve();
      server!.close(() => {
        allAnswered = true;
        resolve();
      });
    });
    // Keep-alive connections between requests would hold the close back until they time out.
    const idle = setInterval(() => server?.closeIdleConnections?.(), 100);
    try {
      // On the clock the other replicas read leases by; the waits below are this host's own.
      await this.leases.capLeases(
        this.leases.now() + this.env.SHUTDOWN_HANDOVER_MS + HAND_OVER_MARGIN_MS,
      );
      // Heard by the others even if this process is killed before the hand-over.
      if (this.leases.running().length > 0)
        await this.signal.publish(deadline + HAND_OVER_MARGIN_MS - performance.now());
      // Every request answered and every recovery done, or the deadline.
      while ((this.leases.running().length > 0 || !allAnswered) && performance.now() < deadline)
        await sleep(Math.min(50, deadline - performance.now()));
      const handed = await this.leases.handOverAll();
      if (handed > 0) {
        this.log.log(`handed ${handed} running task(s) over to other replicas`);
        await this.signal.publish(0);
      }
      // The margin's timer ends with the wait: left running, it would hold a process that has
      // closed everything else open for as long again.
      let margin: NodeJS.Timeout | undefined;
      await Promise.race([
        answered,
        new Promise((r) => (margin = setTimeout(r, HAND_OVER_MARGIN_MS))),
      ]).finally(() => clearTimeout(margin));
    } finally {
      clearInterval(idle);
    }
  }
}
