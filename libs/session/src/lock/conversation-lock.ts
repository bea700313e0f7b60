import { randomBytes } from 'crypto';
import { performance } from 'perf_hooks';
import { RedisClient } from '../redis/redis-client';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId } from '../ids';
import { RedisKeys } from '../store/redis/redis-keys';
import { SessionStore, StoreScope } from '../store/session-store';
import { LIVENESS_CONFIRM_MS, LockHolderLiveness } from './lock-holder-liveness';
import { localHolder, releaseLocal, renewLocal, takeLocal, takeOverLocal } from './local-locks';

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
const TAKE_OVER = `local v = redis.call('GET', KEYS[1]) if v == false or v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 else return 0 end`;
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;

/**
 * How long a handle renews itself after its holder last showed progress. Every step of a turn
 * has a time-out well under this; while agents work, the TaskRun calls renew() itself.
 */
const SELF_RENEW_MAX_MS = 15 * 60_000;

/** A held conversation lock: `fence` goes with every durable write made under it. */
export interface LockHandle {
  sessionId: string;
  token: string;
  fence: number;
  /** Set when the lock was taken over from a stale holder while waiting: that holder's token. */
  takenOverFrom?: string;
  /** With takenOverFrom: the holder's process was gone (its liveness key lapsed). */
  holderGone?: boolean;
  release(): Promise<void>;
  renew(): Promise<boolean>;
}

/**
 * Per-conversation mutual exclusion (seed 004): SET NX PX with a random token, released and
 * renewed only by a token-checked Lua script. Each acquisition also takes a fencing token from
 * the durable store, so a holder that paused past its TTL cannot write after a successor.
 * Without Redis (`redis` null, or Redis failing) the fence alone orders writers. Each lock value
 * names its holder process, whose liveness key (LockHolderLiveness) a waiter checks.
 */
export class ConversationLock {
  private readonly liveness: LockHolderLiveness | null;

  constructor(
    private readonly redis: RedisClient | null,
    private readonly keys: RedisKeys,
    private readonly store: SessionStore,
    private readonly opts: { ttlMs: number; waitMs: number; onRedisError?: (err: unknown) => void },
  ) {
    this.liveness = redis ? new LockHolderLiveness(redis, (id) => keys.lockHolder(id)) : null;
  }

  /**
   * Waits up to `waitMs` for the lock; LOCK_TIMEOUT after that. Now and then while waiting
   * (`staleCheckMs`) it looks at the holder: when the holder's process is gone (its liveness key
   * stayed absent for LIVENESS_CONFIRM_MS) or `staleHolder` answers true for its token (the
   * holder is known to be dead or paused past its lease), the lock is taken over from exactly
   * that token, as `takeOver` does, instead of waiting out its TTL.
   */
  async acquire(
    scope: StoreScope,
    sessionId: string,
    waitMs = this.opts.waitMs,
    stale: { staleHolder?: (token: string) => Promise<boolean>; staleCheckMs?: number } = {},
  ): Promise<LockHandle> {
    assertId(sessionId, 'session id');
    this.liveness?.enter();
    try {
      return await this.wait(scope, sessionId, waitMs, stale);
    } catch (err) {
      this.liveness?.leave();
      throw err;
    }
  }

  private async wait(
    scope: StoreScope,
    sessionId: string,
    waitMs: number,
    stale: { staleHolder?: (token: string) => Promise<boolean>; staleCheckMs?: number },
  ): Promise<LockHandle> {
    const token = this.newToken();
    const key = this.keys.lock(sessionId);
    const deadline = monotonicNow() + waitMs;
    let delay = 5;
    let redisUp = this.redis !== null;
    // Not at once: a live holder usually lets go soon, and the check costs the caller reads.
    const staleCheckMs = stale.staleCheckMs ?? 500;
    let nextStaleCheck = monotonicNow() + staleCheckMs / 2;
    let takenOverFrom: string | undefined;
    let holderGone = false;
    // No Redis at all (the embedded profile: one process): the lock is in this process's memory.
    if (!this.redis)
      return this.waitLocal(scope, sessionId, token, deadline, staleCheckMs, stale.staleHolder);
    // The holder last found without a liveness key, and since when.
    let absent: { holder: string; since: number } | undefined;
    while (redisUp) {
      try {
        if ((await this.redis!.set(key, token, 'PX', this.opts.ttlMs, 'NX')) === 'OK') break;
        if (monotonicNow() >= nextStaleCheck) {
          nextStaleCheck = monotonicNow() + staleCheckMs;
          const holder = await this.redis!.get(key);
          // Gone only when found absent by two looks LIVENESS_CONFIRM_MS apart: from the end of
          // the first to the start of this one, not to whenever the checks below return.
          const lookedAt = monotonicNow();
          // Its own read: on a Redis Cluster the liveness key sits in another slot than the
          // lock, and its master out of reach says nothing of the holder (nor of Redis: the
          // lock's master answered). Unknown is not gone: the waiter waits on.
          const gone = holder ? await this.liveness!.gone(holder).catch(() => false) : false;
          if (holder && gone) {
            if (absent?.holder !== holder) absent = { holder, since: monotonicNow() };
          } else absent = undefined;
          // The lease rule first: the caller can then name the task of the holder it replaces.
          // A check that fails (the database away) only means: go on waiting.
          const isStale =
            !!holder && !!stale.staleHolder && (await stale.staleHolder(holder).catch(() => false));
          holderGone = !isStale && !!absent && lookedAt - absent.since >= LIVENESS_CONFIRM_MS;
          if (holder && (isStale || holderGone)) {
            const taken = await this.redis!.eval(TAKE_OVER, 1, key, holder, token, this.opts.ttlMs);
            if (taken === 1) {
              takenOverFrom = holder;
              break;
            }
          }
        }
      } catch (err) {
        this.opts.onRedisError?.(err);
        redisUp = false;
        break;
      }
      if (monotonicNow() >= deadline)
        throw new LoomError(
          LoomErrorCode.LOCK_TIMEOUT,
          'the conversation is busy with another turn',
        );
      await sleep(delay + Math.random() * delay);
      delay = Math.min(delay * 2, 100);
    }
    const handle = await this.fenced(scope, sessionId, token, redisUp ? this.redis : null);
    return takenOverFrom ? { ...handle, takenOverFrom, holderGone } : handle;
  }

  /** `wait` without Redis: the same turns, in this process's memory (see local-locks). */
  private async waitLocal(
    scope: StoreScope,
    sessionId: string,
    token: string,
    deadline: number,
    staleCheckMs: number,
    staleHolder?: (token: string) => Promise<boolean>,
  ): Promise<LockHandle> {
    const key = this.keys.lock(sessionId);
    let delay = 5;
    let nextStaleCheck = monotonicNow() + staleCheckMs / 2;
    let takenOverFrom: string | undefined;
    while (!takeLocal(key, token, this.opts.ttlMs)) {
      const holder = localHolder(key);
      if (holder && staleHolder && monotonicNow() >= nextStaleCheck) {
        nextStaleCheck = monotonicNow() + staleCheckMs;
        const isStale = await staleHolder(holder).catch(() => false);
        if (isStale && takeOverLocal(key, holder, token, this.opts.ttlMs)) {
          takenOverFrom = holder;
          break;
        }
      }
      if (monotonicNow() >= deadline)
        throw new LoomError(
          LoomErrorCode.LOCK_TIMEOUT,
          'the conversation is busy with another turn',
        );
      await sleep(delay + Math.random() * delay);
      delay = Math.min(delay * 2, 100);
    }
    const handle = await this.fenced(scope, sessionId, token, null);
    return takenOverFrom ? { ...handle, takenOverFrom, holderGone: false } : handle;
  }

  private newToken(): string {
    return this.liveness?.token() ?? randomBytes(16).toString('hex');
  }

  /**
   * Takes the lock when it is free or still held by `staleToken` (a holder known to be dead:
   * its task lease expired), in one atomic step; null when someone else holds it. The new fence
   * shuts the former holder out of every durable write even if it was only paused.
   */
  async takeOver(
    scope: StoreScope,
    sessionId: string,
    staleToken: string | null,
  ): Promise<LockHandle | null> {
    assertId(sessionId, 'session id');
    this.liveness?.enter();
    try {
      const token = this.newToken();
      let redis = this.redis;
      if (!redis) {
        const key = this.keys.lock(sessionId);
        if (!takeOverLocal(key, staleToken ?? '', token, this.opts.ttlMs)) {
          this.liveness?.leave();
          return null;
        }
      } else {
        try {
          const key = this.keys.lock(sessionId);
          const taken = await redis.eval(
            TAKE_OVER,
            1,
            key,
            staleToken ?? '',
            token,
            this.opts.ttlMs,
          );
          if (taken !== 1) {
            this.liveness?.leave();
            return null;
          }
        } catch (err) {
          this.opts.onRedisError?.(err);
          redis = null;
        }
      }
      return await this.fenced(scope, sessionId, token, redis);
    } catch (err) {
      this.liveness?.leave();
      throw err;
    }
  }

  /**
   * Whether the lock holds exactly `token` and that holder's process is alive (its liveness key
   * is there): a token an older record names may be the lock of a live turn that went on to
   * other work under it. False without Redis, or when Redis fails (the fence orders writers).
   * True while the lock holds `token` and the liveness key cannot be read (on a Redis Cluster,
   * its master out of reach while the lock's answers): that holder may well be alive.
   */
  async heldAlive(sessionId: string, token: string): Promise<boolean> {
    if (!this.redis || !this.liveness) return false;
    try {
      if ((await this.redis.get(this.keys.lock(sessionId))) !== token) return false;
      return (await this.liveness.gone(token).catch(() => false)) === false;
    } catch (err) {
      this.opts.onRedisError?.(err);
      return false;
    }
  }

  /** Issues the fencing token; a lock whose fence cannot be issued is given back at once. */
  private async fenced(
    scope: StoreScope,
    sessionId: string,
    token: string,
    redis: RedisClient | null,
  ): Promise<LockHandle> {
    const key = this.keys.lock(sessionId);
    let fence: number;
    try {
      fence = await this.store.nextFence(scope, sessionId);
    } catch (err) {
      await this.release(key, token);
      throw err;
    }
    // The embedded profile's lock lives in memory (see local-locks): renewed there alike.
    const local = !this.redis;
    const extend = async () =>
      local
        ? renewLocal(key, token, this.opts.ttlMs)
        : redis!.eval(RENEW, 1, key, token, this.opts.ttlMs);
    // Held for as long as the holder works, however long one step takes (a slow model call):
    // renewed every third of the TTL until released, until the script finds the lock gone or
    // another token (never taken back: a holder that recovery replaced may be stuck), or, as a
    // backstop against a step that never ends, SELF_RENEW_MAX_MS after the holder last showed
    // progress (acquiring, or renewing itself, as a TaskRun does while agents work). A paused or
    // dead process renews nothing, so its lock lapses and the fence shuts it out.
    let until = monotonicNow() + SELF_RENEW_MAX_MS;
    let released = false;
    const keepAlive =
      redis || local
        ? setInterval(
            () =>
              monotonicNow() > until
                ? clearInterval(keepAlive!)
                : void extend().then(
                    (held) => held === 1 || clearInterval(keepAlive!),
                    () => undefined, // Redis away for a moment: try again next time
                  ),
            Math.max(50, Math.floor(this.opts.ttlMs / 3)),
          ).unref()
        : null;
    return {
      sessionId,
      token,
      fence,
      release: async () => {
        if (keepAlive) clearInterval(keepAlive);
        if (!released) this.liveness?.leave();
        released = true;
        await this.release(key, token);
      },
      renew: async () => {
        until = monotonicNow() + SELF_RENEW_MAX_MS;
        return redis || local ? (await extend().catch(() => 0)) === 1 : true;
      },
    };
  }

  /**
   * Token-checked DEL, also when the lock went on without Redis: a SET that timed out while Redis
   * was paused still runs when it resumes, and would hold the conversation for a whole TTL. A
   * failed release is retried every second until the TTL would have freed the lock anyway.
   */
  private async release(key: string, token: string): Promise<void> {
    const redis = this.redis;
    if (!redis) return releaseLocal(key, token);
    const attempt = () => redis.eval(RELEASE, 1, key, token);
    try {
      await attempt();
    } catch (err) {
      this.opts.onRedisError?.(err);
      const until = monotonicNow() + this.opts.ttlMs;
      const retry = setInterval(() => {
        if (monotonicNow() > until) return clearInterval(retry);
        attempt().then(
          () => clearInterval(retry),
          () => undefined,
        );
      }, 1000);
      retry.unref();
    }
  }
}

/**
 * Milliseconds on a clock that only moves forward: every wait and keep-alive here is a duration
 * on this host, which a wall-clock step (NTP, a VM resumed) must neither cut short nor stretch.
 */
function monotonicNow(): number {
  return performance.now();
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
