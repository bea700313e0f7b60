import { RedisClient } from '@loom/session';
import { CONSUMER_GROUP, deadLetterStreamKey, requestStreamKey } from './redis-streams.options';

/**
 * One round trip in the pattern's slot (the request and dead-letter streams share the hash tag
 * `{pattern}`), so it runs on a Redis Cluster as it does on one server. A script rather than
 * XINFO GROUPS from the client: ioredis does not know where XINFO's key is, and sends it to
 * any node of a cluster first. Returns { pending, lag (-1: unknown), dead letters }.
 */
const DEPTH = `
local dead = redis.call('XLEN', KEYS[2])
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, dead} end
local length = redis.call('XLEN', KEYS[1])
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local g = {}
  for i = 1, #info, 2 do g[info[i]] = info[i + 1] end
  if g.name == ARGV[1] then
    local lag = -1
    if type(g.lag) == 'number' then lag = g.lag end
    return {g.pending, lag, dead}
  end
end
return {0, length, dead}
`;

/** What waits in the request stream of one pattern, as its consumer group sees it. */
export interface RequestQueueDepth {
  /** Delivered to an instance and not acknowledged yet (running, or held by a dead one). */
  pending: number;
  /**
   * Not delivered to any instance yet; null when Redis cannot tell (entries deleted past the
   * group's position). Without a group (no instance ever started) every entry counts: the
   * group an instance creates starts at the stream's beginning.
   */
  lag: number | null;
  /** Requests delivered too often, kept on the dead-letter stream. */
  deadLetters: number;
}

/** Reads the depth of `pattern`'s request stream (none there yet: zeros). */
export async function requestQueueDepth(
  redis: RedisClient,
  keyPrefix: string,
  pattern: string,
): Promise<RequestQueueDepth> {
  const [pending, lag, deadLetters] = (await redis.eval(
    DEPTH,
    2,
    requestStreamKey(keyPrefix, pattern),
    deadLetterStreamKey(keyPrefix, pattern),
    CONSUMER_GROUP,
  )) as [number, number, number];
  return { pending, lag: lag < 0 ? null : lag, deadLetters };
}
