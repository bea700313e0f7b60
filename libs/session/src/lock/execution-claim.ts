import { randomBytes } from 'crypto';
import Redis from 'ioredis';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId } from '../ids';
import { RedisKeys } from '../store/redis/redis-keys';

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
/**
 * Ours for another ARGV[2] ms: extended while we hold it, taken again if it lapsed and nobody
 * else took it (a Redis pause or restart); 0 when another delivery holds it.
 */
const HOLD = `
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0`;

/** A held execution claim; renewed in the background until released. */
export interface ExecutionClaim {
  /**
   * Call before every durable write of the execution: resolves once the claim is ours for a
   * full TTL from now (longer than any statement may take, DB_QUERY_TIMEOUT_MS), so no other
   * delivery can start before the write ends. SUPERSEDED when another delivery took it over
   * (this one lost its claim while cut off from Redis): write nothing more, answer nothing.
   */
  confirm(): Promise<void>;
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
 *
 * A holder cut off from Redis longer than the TTL loses the claim, and the delivery that takes
 * it over runs the execution again. The first one may still be running: `confirm()` before each
 * durable write is what keeps its writes out (it fails closed when it cannot reach Redis).
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
    const timer = setInterval(
      () => void this.hold(key, token).catch(() => undefined),
      this.opts.ttlMs / 3,
    );
    timer.unref();
    return {
      confirm: async () => {
        const giveUp = Date.now() + REDIS_PATIENCE_MS;
        for (;;) {
          try {
            if (await this.hold(key, token)) return;
            throw new LoomError(
              LoomErrorCode.SUPERSEDED,
              'another delivery of this execution took it over',
            );
          } catch (err) {
            if (LoomError.is(err, LoomErrorCode.SUPERSEDED) || Date.now() >= giveUp)
              throw LoomError.is(err) ? err : unavailable();
            await new Promise((r) => setTimeout(r, this.opts.pollMs));
          }
        }
      },
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
      throw unavailable();
    }
  }

  /** True when the claim is ours for ttlMs from now (see HOLD); throws when Redis fails. */
  private async hold(key: string, token: string): Promise<boolean> {
    if (!this.redis) {
      const holder = localClaims.get(key);
      if (holder !== undefined && holder !== token) return false;
      localClaims.set(key, token);
      return true;
    }
    return Number(await this.redis.eval(HOLD, 1, key, token, this.opts.ttlMs)) === 1;
  }

  private async give(key: string, token: string): Promise<void> {
    if (!this.redis) {
      if (localClaims.get(key) === token) localClaims.delete(key);
      return;
    }
    await this.redis.eval(RELEASE, 1, key, token).catch(() => undefined);
  }
}

function unavailable(): LoomError {
  return new LoomError(LoomErrorCode.UNAVAILABLE, 'execution claims are unavailable');
}
