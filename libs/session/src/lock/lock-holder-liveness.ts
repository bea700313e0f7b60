import { randomBytes } from 'crypto';
import { RedisClient } from '../redis/redis-client';

/** How often a process that waits for or holds a lock rewrites its liveness key. */
export const LIVENESS_BEAT_MS = 1000;
/** The key's expiry: a holder that missed this many beats' worth is taken for gone. */
export const LIVENESS_TTL_MS = 3000;
/**
 * A waiter takes a holder for gone only once its key has stayed absent this long: longer than a
 * beat, so a live holder whose key lapsed while Redis was away has written it again by then.
 */
export const LIVENESS_CONFIRM_MS = 1500;

const TOKEN = /^([A-Za-z0-9_-]{12})\.[0-9a-f]{32}$/;

/**
 * This process's sign of life as a conversation-lock holder: the key `<p>lockholder:<id>`,
 * rewritten every second with a 3 s expiry while the process waits for or holds a lock. Every
 * lock value it writes names it (`<id>.<random>`), so a waiting turn can tell a holder whose
 * process is gone (killed: nothing rewrites its key) from one at work, whatever that holder was
 * doing (planning, finishing, summarizing), and take the lock over instead of waiting out its
 * TTL. A paused process's key lapses as well; the new fence shuts it out when it wakes.
 */
export class LockHolderLiveness {
  readonly id = randomBytes(9).toString('base64url');
  private users = 0;
  private beat?: NodeJS.Timeout;
  private markedAt = 0;

  constructor(
    private readonly redis: RedisClient,
    private readonly keyOf: (holderId: string) => string,
  ) {
    // Beats fail while Redis is away (no offline queue), and a Redis that restarts comes back
    // without the key: written again at once, before waiters that reconnected sooner take this
    // live holder for gone, rather than at the next beat, up to a second later.
    redis.on('ready', () => {
      if (this.users > 0) void this.mark();
    });
  }

  /** A new lock value naming this process. */
  token(): string {
    return `${this.id}.${randomBytes(16).toString('hex')}`;
  }

  /**
   * Beats while anyone waits or holds. Not awaited: a waiter takes a holder for gone only after
   * LIVENESS_CONFIRM_MS without its key, and the first write lands long before that.
   */
  enter(): void {
    if (this.users++ === 0)
      this.beat = setInterval(() => void this.mark(), LIVENESS_BEAT_MS).unref();
    if (Date.now() - this.markedAt >= LIVENESS_BEAT_MS) void this.mark();
  }

  leave(): void {
    if (--this.users === 0) clearInterval(this.beat);
  }

  /** Whether the holder named by a lock value has no liveness key; null: it names no holder. */
  async gone(lockValue: string): Promise<boolean | null> {
    const holder = TOKEN.exec(lockValue)?.[1];
    if (!holder) return null;
    return (await this.redis.exists(this.keyOf(holder))) === 0;
  }

  private async mark(): Promise<void> {
    this.markedAt = Date.now();
    // Redis away: the lock cannot be renewed either; the next beat tries again.
    await this.redis
      .set(this.keyOf(this.id), '1', 'PX', LIVENESS_TTL_MS)
      .catch(() => (this.markedAt = 0));
  }
}
