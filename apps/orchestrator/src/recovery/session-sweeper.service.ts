import { performance } from 'perf_hooks';
import { Inject, Injectable, Logger } from '@nestjs/common';
import {
  ConversationLock,
  ConversationRepository,
  isSystemId,
  LockHandle,
  LoomError,
  LoomErrorCode,
  MysqlSessionStore,
  SESSION_INFRA,
  SessionInfra,
  StateKeys,
  SYSTEM_TENANT,
  SystemSessions,
  TieredSessionStore,
} from '@loom/session';

/**
 * Conversations purged, and rows deleted, per batch: each statement is bounded, and batches run
 * one after another, so a run never hogs MySQL.
 */
const CONVERSATIONS_PER_BATCH = 200;
const ROW_BATCH = 1000;
/**
 * A run goes on while its batches come back full, for up to this long (ms; each step starts
 * within it): a fixed number of batches per run (200 conversations, 1,000 fences every 10 min)
 * fell behind for good on a deployment whose conversations go idle, or are deleted, faster.
 */
export const SWEEP_RUN_BUDGET_MS = 60_000;

export interface SweepReport {
  conversations: number;
  rows: number;
  /** `_fence` rows left alone under a deleted conversation's id, removed. */
  fences: number;
  skipped: boolean;
}

/**
 * Removes what outlived its expiry from the durable store, one replica at a time (a lock on a
 * system session): whole conversations idle past their `conversation` row's expiry (30 days),
 * each under its own conversation lock and re-checked there, then expired rows of any other
 * key (e.g. agent sessions a late execution left behind), then `_fence` rows left alone under a
 * deleted conversation's id: each in bounded batches, repeated while they come back full, for up
 * to SWEEP_RUN_BUDGET_MS a run.
 */
@Injectable()
export class SessionSweeper {
  private readonly log = new Logger('SessionSweeper');
  /** A stopping replica takes no further batch (a run may otherwise go on for a minute). */
  private stopping = false;

  constructor(
    @Inject(SESSION_INFRA) private readonly infra: SessionInfra,
    private readonly conversations: ConversationRepository,
    private readonly lock: ConversationLock,
  ) {}

  async sweep(now = new Date()): Promise<SweepReport> {
    const durable = this.mysql();
    const skipped = { conversations: 0, rows: 0, fences: 0, skipped: true };
    if (!durable) return skipped;
    let held: LockHandle;
    try {
      held = await this.lock.acquire({ tenantId: SYSTEM_TENANT }, SystemSessions.sweeper, 0);
    } catch (err) {
      if (LoomError.is(err, LoomErrorCode.LOCK_TIMEOUT)) return skipped;
      throw err;
    }
    // Each step takes one batch, as every run did; further ones while the run has time left.
    const end = performance.now() + SWEEP_RUN_BUDGET_MS;
    const goOn = (batches: number) => !this.stopping && (batches === 0 || performance.now() < end);
    try {
      let conversations = 0;
      for (let more = true, b = 0; more && goOn(b); b++) {
        await held.renew();
        const batch = await this.purgeIdle(durable, now);
        conversations += batch.purged;
        // Full, and not only conversations it must leave (busy, touched again): there may be more.
        more = batch.found === CONVERSATIONS_PER_BATCH && batch.purged > 0;
      }
      let rows = 0;
      for (let n = ROW_BATCH, b = 0; n === ROW_BATCH && goOn(b); rows += n, b++) {
        await held.renew();
        n = await durable.sweepExpired(now, ROW_BATCH, {
          exceptKeys: [StateKeys.conversation],
        });
      }
      let fences = 0;
      // A batch that removed nothing has looked at every expired fence (those it must keep stop
      // expiring), so the next would find none; one that removed some may have left more.
      for (let n = -1, b = 0; n !== 0 && goOn(b); fences += n, b++) {
        await held.renew();
        n = await durable.sweepOrphanFences(now, ROW_BATCH);
      }
      if (conversations || rows || fences)
        this.log.log(
          `swept ${conversations} idle conversations, ${rows} expired rows and ${fences} orphan fences`,
        );
      return { conversations, rows, fences, skipped: false };
    } finally {
      await held.release();
    }
  }

  /** One batch: the expired conversations found (at most CONVERSATIONS_PER_BATCH), and purged. */
  private async purgeIdle(
    durable: MysqlSessionStore,
    now: Date,
  ): Promise<{ found: number; purged: number }> {
    const expired = await durable.expiredSessions(
      StateKeys.conversation,
      now,
      CONVERSATIONS_PER_BATCH,
    );
    let purged = 0;
    for (const { sessionId, tenantId } of expired) {
      if (isSystemId(sessionId)) continue;
      const lock = await this.lock.takeOver({ tenantId }, sessionId, null);
      if (!lock) continue; // a turn is running: it is not idle
      try {
        const meta = await this.conversations.metaOf(tenantId, sessionId);
        if (meta && (Date.parse(meta.expiresAt) > now.getTime() || meta.activeTaskIds.length))
          continue;
        await this.conversations.purge(tenantId, sessionId);
        purged++;
      } finally {
        await lock.release();
      }
    }
    return { found: expired.length, purged };
  }

  beforeApplicationShutdown(): void {
    this.stopping = true;
  }

  private mysql(): MysqlSessionStore | null {
    const store = this.infra.store;
    const durable = store instanceof TieredSessionStore ? store.durable : store;
    return durable instanceof MysqlSessionStore ? durable : null;
  }
}
