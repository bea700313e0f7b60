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

/** Conversations purged and row batches deleted per run, at most: a run never hogs MySQL. */
const CONVERSATIONS_PER_RUN = 200;
const ROW_BATCH = 1000;
const ROW_BATCHES_PER_RUN = 20;

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
 * key (e.g. agent sessions a late execution left behind), in bounded batches, then one batch of
 * `_fence` rows left alone under a deleted conversation's id.
 */
@Injectable()
export class SessionSweeper {
  private readonly log = new Logger('SessionSweeper');

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
    try {
      const conversations = await this.purgeIdle(durable, now);
      let rows = 0;
      for (let i = 0; i < ROW_BATCHES_PER_RUN; i++) {
        await held.renew();
        const n = await durable.sweepExpired(now, ROW_BATCH, {
          exceptKeys: [StateKeys.conversation],
        });
        rows += n;
        if (n < ROW_BATCH) break;
      }
      await held.renew();
      const fences = await durable.sweepOrphanFences(now, ROW_BATCH);
      if (conversations || rows || fences)
        this.log.log(
          `swept ${conversations} idle conversations, ${rows} expired rows and ${fences} orphan fences`,
        );
      return { conversations, rows, fences, skipped: false };
    } finally {
      await held.release();
    }
  }

  private async purgeIdle(durable: MysqlSessionStore, now: Date): Promise<number> {
    const expired = await durable.expiredSessions(
      StateKeys.conversation,
      now,
      CONVERSATIONS_PER_RUN,
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
    return purged;
  }

  private mysql(): MysqlSessionStore | null {
    const store = this.infra.store;
    const durable = store instanceof TieredSessionStore ? store.durable : store;
    return durable instanceof MysqlSessionStore ? durable : null;
  }
}
