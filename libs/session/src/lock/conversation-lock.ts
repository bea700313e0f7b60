import { randomBytes } from 'crypto';
import Redis from 'ioredis';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId } from '../ids';
import { RedisKeys } from '../store/redis/redis-keys';
import { SessionStore, StoreScope } from '../store/session-store';

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;

/** A held conversation lock: `fence` goes with every durable write made under it. */
export interface LockHandle {
  sessionId: string;
  token: string;
  fence: number;
  release(): Promise<void>;
  renew(): Promise<boolean>;
}

/**
 * Per-conversation mutual exclusion (seed 004): SET NX PX with a random token, released and
 * renewed only by a token-checked Lua script. Each acquisition also takes a fencing token from
 * the durable store, so a holder that paused past its TTL cannot write after a successor.
 * Without Redis (`redis` null, or Redis failing) the fence alone orders writers.
 */
export class ConversationLock {
  constructor(
    private readonly redis: Redis | null,
    private readonly keys: RedisKeys,
    private readonly store: SessionStore,
    private readonly opts: { ttlMs: number; waitMs: number; onRedisError?: (err: unknown) => void },
  ) {}

  /** Waits up to `waitMs` for the lock; LOCK_TIMEOUT after that. */
  async acquire(
    scope: StoreScope,
    sessionId: string,
    waitMs = this.opts.waitMs,
  ): Promise<LockHandle> {
    assertId(sessionId, 'session id');
    const token = randomBytes(16).toString('hex');
    const key = this.keys.lock(sessionId);
    const deadline = Date.now() + waitMs;
    let delay = 5;
    let redisUp = this.redis !== null;
    while (redisUp) {
      try {
        if ((await this.redis!.set(key, token, 'PX', this.opts.ttlMs, 'NX')) === 'OK') break;
      } catch (err) {
        this.opts.onRedisError?.(err);
        redisUp = false;
        break;
      }
      if (Date.now() >= deadline)
        throw new LoomError(
          LoomErrorCode.LOCK_TIMEOUT,
          'the conversation is busy with another turn',
        );
      await sleep(delay + Math.random() * delay);
      delay = Math.min(delay * 2, 100);
    }
    const fence = await this.store.nextFence(scope, sessionId);
    const redis = redisUp ? this.redis : null;
    return {
      sessionId,
      token,
      fence,
      release: async () => {
        await redis?.eval(RELEASE, 1, key, token).catch((err) => this.opts.onRedisError?.(err));
      },
      renew: async () => {
        if (!redis) return true;
        return (await redis.eval(RENEW, 1, key, token, this.opts.ttlMs).catch(() => 0)) === 1;
      },
    };
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
