import type { RedisClient } from '@loom/session';

/** What @nestjs/throttler's ThrottlerStorage.increment resolves to (times in seconds). */
export interface ThrottleRecord {
  totalHits: number;
  timeToExpire: number;
  isBlocked: boolean;
  timeToBlockExpire: number;
}

/**
 * One atomic step of a fixed-window counter: INCR, PEXPIRE on the first hit of a window, and a
 * block key once the limit is passed (no increments while blocked). KEYS[1] counter, KEYS[2]
 * block; ARGV[1] window ms, [2] limit, [3] block ms. Returns {hits, window ms left, blocked, block ms left}.
 */
export const THROTTLE_SCRIPT = `
local blocked = redis.call('PTTL', KEYS[2])
if blocked > 0 then
  local hits = tonumber(redis.call('GET', KEYS[1]) or '0')
  return {hits, math.max(redis.call('PTTL', KEYS[1]), 0), 1, blocked}
end
local hits = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
if hits > tonumber(ARGV[2]) then
  local block = tonumber(ARGV[3])
  if block > 0 then
    redis.call('SET', KEYS[2], '1', 'PX', block)
    return {hits, ttl, 1, block}
  end
  return {hits, ttl, 1, ttl}
end
return {hits, ttl, 0, 0}
`;

/**
 * A ThrottlerStorage for @nestjs/throttler on ioredis, shared by every orchestrator replica:
 * counters live under `<prefix>throttle:{<key>}` (one hash slot per key). When Redis does not
 * answer it lets the request through (availability over rate limiting) and reports the error.
 */
export class RedisThrottlerStorage {
  constructor(
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {
    if (!('loomThrottle' in redis))
      redis.defineCommand('loomThrottle', { numberOfKeys: 2, lua: THROTTLE_SCRIPT });
  }

  async increment(
    key: string,
    ttl: number,
    limit: number,
    blockDuration: number,
    throttlerName: string,
  ): Promise<ThrottleRecord> {
    const base = `${this.prefix}throttle:{${throttlerName}:${key}}`;
    try {
      const [hits, ttlMs, blocked, blockMs] = (await (
        this.redis as unknown as {
          loomThrottle(...args: Array<string | number>): Promise<number[]>;
        }
      ).loomThrottle(base, `${base}:block`, ttl, limit, blockDuration)) as number[];
      return {
        totalHits: Number(hits),
        timeToExpire: Math.ceil(Number(ttlMs) / 1000),
        isBlocked: Number(blocked) === 1,
        timeToBlockExpire: Math.ceil(Number(blockMs) / 1000),
      };
    } catch (err) {
      this.onError(err);
      return { totalHits: 0, timeToExpire: 0, isBlocked: false, timeToBlockExpire: 0 };
    }
  }
}
