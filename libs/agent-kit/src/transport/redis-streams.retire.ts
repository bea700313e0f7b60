import { isCluster, RedisClient, SharedClock } from '@loom/session';
import { appendReply, Entry, execOrThrow, isExpired, replyToOf } from './redis-streams.entries';
import { requestStreamKey } from './redis-streams.options';

/** Entries read (and answered) per round trip. */
const PAGE = 100;
/** Rounds of "answer what came in since, then delete if nothing more did" before giving up. */
const MAX_ROUNDS = 20;

/**
 * Deletes the stream only if it holds nothing or nothing was added since `ARGV[1]` (the last
 * entry answered): a request sent meanwhile is answered in the next round, never dropped.
 */
const DELETE_IF_LAST = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local lastId
for i = 1, #info, 2 do if info[i] == 'last-generated-id' then lastId = info[i + 1] end end
if redis.call('XLEN', KEYS[1]) == 0 or lastId == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0`;

export interface RetiredStream {
  /** Requests whose callers were told, with `error`, that nobody will answer them. */
  failed: number;
  /** Requests past their deadline (their callers stopped waiting), dropped without a reply. */
  expired: number;
  /** Whether the stream (with its consumer group and pending entries) is gone. */
  deleted: boolean;
}

/**
 * The request stream of a pattern nobody will serve again (a retired agent type with no live
 * instance): every request still in it, pending on a dead consumer or never delivered, is
 * answered on its caller's reply stream with `error` (a caller still waiting fails at once,
 * instead of after its time-out), then the stream is deleted with its consumer group. Requests
 * whose deadline passed get no reply. Runs in bounded rounds; `deleted: false` when requests kept
 * arriving (an orchestrator that still plans the type): run it again later.
 */
export async function retireRequestStream(
  redis: RedisClient,
  keyPrefix: string,
  pattern: string,
  error: { code: string; message: string },
): Promise<RetiredStream> {
  const key = requestStreamKey(keyPrefix, pattern);
  const out: RetiredStream = { failed: 0, expired: 0, deleted: false };
  let last = '0-0';
  const clock = new SharedClock(redis);
  await clock.sync();
  for (let round = 0; round < MAX_ROUNDS; round++) {
    for (;;) {
      const page = await redis.xrange(key, `(${last}`, '+', 'COUNT', PAGE);
      if (page.length === 0) break;
      // One MULTI of every reply; on a cluster, whose reply streams sit in many slots, one each.
      const tx = isCluster(redis) ? null : redis.multi();
      const each: Promise<void>[] = [];
      for (const [entryId, flat] of page) {
        const entry = toEntry(key, pattern, entryId, flat);
        if (isExpired(entry, clock.now()) || !replyToOf(entry)) out.expired++;
        else {
          out.failed++;
          const packet = { err: error, isDisposed: true };
          if (tx) appendReply(tx, entry, packet, false);
          else each.push(execOrThrow(appendReply(redis.multi(), entry, packet, false)));
        }
      }
      await (tx ? execOrThrow(tx) : Promise.all(each));
      last = page[page.length - 1][0];
    }
    if (Number(await redis.eval(DELETE_IF_LAST, 1, key, last)) === 1) {
      out.deleted = true;
      return out;
    }
  }
  return out;
}

function toEntry(key: string, pattern: string, entryId: string, flat: string[]): Entry {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
  return { key, pattern, entryId, fields, deliveryCount: 0 };
}
