import { randomBytes } from 'crypto';
import Redis from 'ioredis';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId } from '../ids';
import { RedisKeys } from '../store/redis/redis-keys';

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;

/** A held execution claim; renewed in the background until released. */
export interface ExecutionClaim {
  release(): Promise<void>;
}

export interface ExecutionClaimOptions {
  /** A claim whose holder died frees itself after this long (ms). */
  ttlMs: number;
  /** How often a waiting delivery looks again (ms). */
  pollMs: number;
}

const REDIS_PATIENCE_MS = 3000;

/** One process's claims in the embedded profile (no Redis there, and only one process). */
const localClaims = new Map<string, string>();

/**
 * "Only one delivery of an agent execution runs at a time": `SET NX PX` on
 * `<p>s:{<conversationId>}:claim:<agentSessionId>`, renewed while the handler runs and released
 * by a token-checked script. A second delivery waits until the first lets go (then finds the
 * stored result), or until its own deadline.
 */
export class ExecutionClaims {
  constructor(
    private readonly redis: Redis | null,
    private readonly keys: RedisKeys,
    private readonly opts: ExecutionClaimOptions = { ttlMs: 15_000, pollMs: 200 },
  ) {}

  /** Waits until the claim is ours; TIMEOUT at `deadline` (epoch ms), UNAVAILABLE without Redis. */
  async acquire(
    conversationId: string,
    agentSessionId: string,
    deadline: number,
  ): Promise<ExecutionClaim> {
    assertId(conversationId, 'conversation id');
    assertId(agentSessionId, 'agent session id');
    const key = `${this.keys.session(conversationId)}:claim:${agentSessionId}`;
    const token = randomBytes(16).toString('hex');
    // A Redis blip (reconnecting after a restart or pause) is waited out briefly, then UNAVAILABLE.
    const giveUpOnRedis = Math.min(deadline, Date.now() + REDIS_PATIENCE_MS);
    for (;;) {
      const taken = await this.tryTake(key, token).catch((err: unknown) => {
        if (Date.now() + this.opts.pollMs > giveUpOnRedis) throw err;
        return false;
      });
      if (taken) break;
      if (Date.now() + this.opts.pollMs > deadline)
        throw new LoomError(
          LoomErrorCode.TIMEOUT,
          'another delivery of this execution is still running',
        );
      await new Promise((r) => setTimeout(r, this.opts.pollMs));
    }
    const timer = setInterval(() => void this.renew(key, token), this.opts.ttlMs / 3);
    timer.unref();
    return {
      release: async () => {
        clearInterval(timer);
        await this.give(key, token);
      },
    };
  }

  private async tryTake(key: string, token: string): Promise<boolean> {
    if (!this.redis) {
      if (localClaims.has(key)) return false;
      localClaims.set(key, token);
      return true;
    }
    try {
      return (await this.redis.set(key, token, 'PX', this.opts.ttlMs, 'NX')) === 'OK';
    } catch {
      throw new LoomError(LoomErrorCode.UNAVAILABLE, 'execution claims are unavailable');
    }
  }

  private async renew(key: string, token: string): Promise<void> {
    await this.redis?.eval(RENEW, 1, key, token, this.opts.ttlMs).catch(() => undefined);
  }

  private async give(key: string, token: string): Promise<void> {
    if (!this.redis) {
      if (localClaims.get(key) === token) localClaims.delete(key);
      return;
    }
    await this.redis.eval(RELEASE, 1, key, token).catch(() => undefined);
  }
}
