import { randomBytes } from 'crypto';
import { RedisClient } from '../redis/redis-client';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId } from '../ids';
import { RedisKeys } from '../store/redis/redis-keys';

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
/**
 * KEYS[1] the claim, KEYS[2] its last taker (kept past the claim, for ARGV[3] ms): taken when
 * free, and the taker recorded, in one step.
 */
const TAKE = `
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
  return 1
end
return 0`;
/**
 * Ours for another ARGV[2] ms: extended while we hold it, taken back if it lapsed while nobody
 * else took it since we did (a Redis pause or restart); 0 when another delivery holds it or has
 * held it, even one that has let go since (its result stands); -1 when it was revoked (REVOKE).
 */
const HOLD = `
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
local last = redis.call('GET', KEYS[2])
if not holder and last == 'revoked' then return -1 end
if not holder and (not last or last == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0`;
/**
 * KEYS: pairs of a claim and its last taker. Each claim is let go whoever holds it, and its last
 * taker becomes nobody's token for at least ARGV[1] ms (its own TTL when longer), so HOLD never
 * extends nor takes it back for the delivery that held it.
 */
const REVOKE = `
for i = 1, #KEYS, 2 do
  redis.call('DEL', KEYS[i])
  local ttl = redis.call('PTTL', KEYS[i + 1])
  if ttl < tonumber(ARGV[1]) then ttl = ARGV[1] end
  redis.call('SET', KEYS[i + 1], 'revoked', 'PX', ttl)
end
return 1`;

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

const SUPERSEDED_BECAUSE = {
  released: 'this execution has ended: nothing more is written',
  lost: 'another delivery of this execution took it over',
  revoked: 'a retry of its task replaced this execution: nothing more is written',
};

/** How long the last taker of a claim is remembered beyond the execution's deadline (ms). */
const LAST_TAKER_GRACE_MS = 10 * 60 * 1000;

/**
 * One process's claims in the embedded profile (no Redis there, and only one process): a local
 * claim never lapses, so it is only ever let go by its holder.
 */
const localClaims = new Map<string, string>();

/**
 * "Only one delivery of an agent execution runs at a time": `SET NX PX` on
 * `<p>s:{<conversationId>}:claim:<agentSessionId>`, renewed while the handler runs and released
 * by a token-checked script. A second delivery waits until the first lets go (then finds the
 * stored result), or until its own deadline.
 *
 * A holder cut off from Redis longer than the TTL loses the claim, and the delivery that takes
 * it over runs the execution again. The first one may still be running: `confirm()` before each
 * durable write is what keeps its writes out (it fails closed when it cannot reach Redis). Each
 * take records its taker in `…:claim:<agentSessionId>:last` (until 10 min past the request's
 * deadline), so a lapsed claim is taken back only by the delivery that took it last. `revoke()`
 * lets go of the claims of executions a retry replaced and sets their last taker to `revoked`:
 * a delivery still running one of them then finds its next `confirm()` SUPERSEDED.
 */
export class ExecutionClaims {
  constructor(
    private readonly redis: RedisClient | null,
    private readonly keys: RedisKeys,
    private readonly opts: ExecutionClaimOptions = { ttlMs: 15_000, pollMs: 200 },
    /**
     * The clock `deadline` is on: the caller's (the request's or assignment's, written by another
     * host), so the deployment's SharedClock wherever there is one.
     */
    private readonly clock: { now(): number } = { now: () => Date.now() },
  ) {}

  /**
   * Waits until the claim is ours; TIMEOUT at `deadline` (epoch ms on `clock`), UNAVAILABLE without Redis,
   * and the signal's reason once `signal` aborts (the execution was cancelled while it waited).
   */
  async acquire(
    conversationId: string,
    agentSessionId: string,
    deadline: number,
    signal?: AbortSignal,
  ): Promise<ExecutionClaim> {
    assertId(conversationId, 'conversation id');
    assertId(agentSessionId, 'agent session id');
    const keys = this.keysOf(conversationId, agentSessionId);
    const token = randomBytes(16).toString('hex');
    const untilDeadline = Number.isFinite(deadline) ? Math.ceil(deadline - this.clock.now()) : 0;
    const lastTtlMs = Math.max(untilDeadline, 0) + LAST_TAKER_GRACE_MS; // PX takes integers only
    // A Redis blip (reconnecting after a restart or pause) is waited out briefly, then UNAVAILABLE.
    const giveUpOnRedis = Math.min(deadline, this.clock.now() + REDIS_PATIENCE_MS);
    for (;;) {
      signal?.throwIfAborted();
      const taken = await this.tryTake(keys, token, lastTtlMs).catch((err: unknown) => {
        if (this.clock.now() + this.opts.pollMs > giveUpOnRedis) throw err;
        return false;
      });
      if (taken) break;
      if (this.clock.now() + this.opts.pollMs > deadline)
        throw new LoomError(
          LoomErrorCode.TIMEOUT,
          'another delivery of this execution is still running',
        );
      await new Promise((r) => setTimeout(r, this.opts.pollMs));
    }
    const timer = setInterval(
      () => void this.hold(keys, token).catch(() => undefined),
      this.opts.ttlMs / 3,
    );
    timer.unref();
    let released = false;
    return {
      confirm: async () => {
        // A duration on the claim's clock, not the wall clock: a host clock stepped while Redis
        // blips neither rejects a claim still ours nor holds the write for as long as the step.
        const giveUp = this.clock.now() + REDIS_PATIENCE_MS;
        for (;;) {
          try {
            const held = released ? 'released' : await this.hold(keys, token);
            if (held === 'held') return;
            throw new LoomError(LoomErrorCode.SUPERSEDED, SUPERSEDED_BECAUSE[held]);
          } catch (err) {
            if (LoomError.is(err, LoomErrorCode.SUPERSEDED) || this.clock.now() >= giveUp)
              throw LoomError.is(err) ? err : unavailable();
            await new Promise((r) => setTimeout(r, this.opts.pollMs));
          }
        }
      },
      release: async () => {
        released = true;
        clearInterval(timer);
        await this.give(keys, token);
      },
    };
  }

  /**
   * The orchestrator gave these executions up and runs their steps again under new ids (a
   * retry): whichever delivery still holds one of their claims finds its next `confirm()`
   * SUPERSEDED, so it writes nothing beside the new execution. One Redis call; UNAVAILABLE
   * without Redis.
   */
  async revoke(conversationId: string, agentSessionIds: string[]): Promise<void> {
    assertId(conversationId, 'conversation id');
    agentSessionIds.forEach((id) => assertId(id, 'agent session id'));
    if (agentSessionIds.length === 0) return;
    const all = agentSessionIds.map((id) => this.keysOf(conversationId, id));
    if (!this.redis) {
      for (const keys of all) localClaims.delete(keys.claim);
      return;
    }
    const flat = all.flatMap((k) => [k.claim, k.last]);
    await this.redis.eval(REVOKE, flat.length, ...flat, LAST_TAKER_GRACE_MS).catch(() => {
      throw unavailable();
    });
  }

  private keysOf(conversationId: string, agentSessionId: string): ClaimKeys {
    const claim = `${this.keys.session(conversationId)}:claim:${agentSessionId}`;
    return { claim, last: `${claim}:last` };
  }

  private async tryTake(keys: ClaimKeys, token: string, lastTtlMs: number): Promise<boolean> {
    if (!this.redis) {
      if (localClaims.has(keys.claim)) return false;
      localClaims.set(keys.claim, token);
      return true;
    }
    try {
      const args = [token, this.opts.ttlMs, lastTtlMs];
      return Number(await this.redis.eval(TAKE, 2, keys.claim, keys.last, ...args)) === 1;
    } catch {
      throw unavailable();
    }
  }

  /** 'held' when the claim is ours for ttlMs from now (see HOLD); throws when Redis fails. */
  private async hold(keys: ClaimKeys, token: string): Promise<'held' | 'lost' | 'revoked'> {
    if (!this.redis) return localClaims.get(keys.claim) === token ? 'held' : 'lost';
    const held = await this.redis.eval(HOLD, 2, keys.claim, keys.last, token, this.opts.ttlMs);
    return Number(held) === 1 ? 'held' : Number(held) === -1 ? 'revoked' : 'lost';
  }

  private async give(keys: ClaimKeys, token: string): Promise<void> {
    if (!this.redis) {
      if (localClaims.get(keys.claim) === token) localClaims.delete(keys.claim);
      return;
    }
    await this.redis.eval(RELEASE, 1, keys.claim, token).catch(() => undefined);
  }
}

interface ClaimKeys {
  claim: string;
  last: string;
}

function unavailable(): LoomError {
  return new LoomError(LoomErrorCode.UNAVAILABLE, 'execution claims are unavailable');
}
