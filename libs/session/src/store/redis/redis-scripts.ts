/**
 * Lua scripts of the Redis backend. Every key a script touches carries the session's hash tag,
 * so each runs on one Redis Cluster slot. Common KEYS: [1] _meta hash (tenant, user, u:<key> =
 * updatedAt ms), [2] _keys set, [3] the state key, [4] _fence counter; refills also [5] the
 * `_gone` tombstone a session's deletion leaves and [6] the one a deletion of this key leaves.
 * A cache's reads, refills and writes are also given the key's `_writing` set (see MARK_WRITING),
 * and a read that may refill, and the refill, the session's refill epoch (see EPOCH_MS).
 * Return codes below 0: -1 another tenant owns the session, -2 stale fence, -3 index taken,
 * -4 the execution's task no longer runs it.
 */
const PRELUDE = `
-- Extends a bookkeeping key to ttl ms, never shortening it; a key without a TTL keeps none,
-- unless this script created the session (fresh): then it gets the TTL.
local function extend(k, ttl, fresh)
  if ttl <= 0 then return end
  if fresh then redis.call('PEXPIRE', k, ttl, 'NX') end
  redis.call('PEXPIRE', k, ttl, 'GT')
end
local owner = redis.call('HGET', KEYS[1], 'tenant')
`;

/**
 * A cache's durable writes of a key under way: its `_writing` set holds each write's token until
 * the write's Redis half removes it, scored by a deadline (ms, Redis's clock). `under_way(k)`:
 * 'none'; 'live' (deadlines ahead); or 'lost' when a deadline passed: that writer stopped between
 * its durable commit and its Redis write (killed, or it never learned whether MySQL committed),
 * so a cached copy may lack its write. Lost writes are removed as they are found.
 */
const UNDER_WAY = `
local function under_way(k)
  if redis.call('EXISTS', k) == 0 then return 'none' end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('ZREMRANGEBYSCORE', k, '-inf', now) > 0 then return 'lost' end
  return 'live'
end
`;

/** A read's first step in a cache (KEYS[5] the `_writing` set): a copy that may lack a lost write goes, and the read misses. */
const lostWriteMiss = (miss: string) => `
if KEYS[5] and under_way(KEYS[5]) == 'lost' then redis.call('DEL', KEYS[3]); return ${miss} end
`;

/**
 * A cache's refill epoch, `_epoch` of the session: a read that misses and will refill (KEYS[6]
 * given) gets it, creating it when Redis holds none (`candidate`, a token new to this Redis), and
 * the refill brings it back; FILL, FILL_LIST and MARK_ABSENT refuse a refill whose epoch is not
 * the one Redis holds. A Redis that restarted empty between the read's miss and its refill has
 * lost the epoch with every write's Redis half it held, so the refill's durable read, which may
 * predate such a write, is not cached: reads go to MySQL until a refill after the restart. It
 * lasts EPOCH_MS after the last miss, longer than a refill's MySQL read may take.
 */
const EPOCH_MS = 60_000;
const epochOnMiss = (candidate: string) => `
local function epoch()
  if not KEYS[6] then return nil end
  local e = redis.call('GET', KEYS[6])
  if e then redis.call('PEXPIRE', KEYS[6], ${EPOCH_MS}); return e end
  redis.call('SET', KEYS[6], ${candidate}, 'PX', ${EPOCH_MS})
  return ${candidate}
end
`;

/** A refill's check (`k` the session's `_epoch`, `e` the epoch its read's miss returned). */
const epochHolds = (k: string, e: string) => `
if ${k} and redis.call('GET', ${k}) ~= ${e} then return 0 end
`;

/**
 * Writes shared by save and append: owner check, fence check, bookkeeping (one HSET). ARGV[1]
 * tenant, [2] state key, [4] ttl ms, [5] user, [6] now ms, [7] fence. Sets `fresh` when this
 * write claims the session, or writes again one that held nothing but its fence (`remnant`), and
 * `indexFresh` when it creates the `_keys` index (see BOOKKEEPING_TTL).
 */
const WRITE_GUARD = `
if owner and owner ~= ARGV[1] then return -1 end
if ARGV[7] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[7] then return -2 end
local ttl = tonumber(ARGV[4])
local fresh = not owner
-- A session that held only its owner and fence (deleted, or only locked; standalone) is written
-- again: they stop lapsing, and take this write's TTL as a new session's would.
if owner and redis.call('HDEL', KEYS[1], 'remnant') == 1 then
  redis.call('PERSIST', KEYS[1]); redis.call('PERSIST', KEYS[4]); fresh = true
end
local fields = {'u:' .. ARGV[2], ARGV[6]}
if fresh then fields[#fields + 1] = 'tenant'; fields[#fields + 1] = ARGV[1] end
if ARGV[5] ~= '' then fields[#fields + 1] = 'user'; fields[#fields + 1] = ARGV[5] end
redis.call('HSET', KEYS[1], unpack(fields))
local indexFresh = redis.call('EXISTS', KEYS[2]) == 0
redis.call('SADD', KEYS[2], ARGV[2])
`;

/**
 * A write of an agent execution (WriteOptions.execution), when KEYS[5] (its task's value key)
 * is given: only while that task is RUNNING and has not recorded ARGV[10] (the agentSessionId)
 * as FAILED.
 */
const EXECUTION_GUARD = `
if KEYS[5] then
  if owner and owner ~= ARGV[1] then return -1 end
  local raw = redis.call('GET', KEYS[5])
  if not raw or string.byte(raw, 1) == 0 then return -4 end
  local task = cjson.decode(raw)
  if type(task) ~= 'table' or task.status ~= 'RUNNING' then return -4 end
  if type(task.executions) == 'table' then
    for _, e in ipairs(task.executions) do
      if type(e) == 'table' and e.agentSessionId == ARGV[10] and e.status == 'FAILED' then return -4 end
    end
  end
end
`;

/**
 * The session's bookkeeping keys live at least as long as the state key just written. An index
 * this write created (`indexFresh`: every key it listed was deleted, `_meta` stayed) takes the
 * TTL as a new session's would: SADD made it without one, and it would outlive the session.
 */
const BOOKKEEPING_TTL = `
if ttl > 0 then
  extend(KEYS[1], ttl, fresh); extend(KEYS[2], ttl, fresh or indexFresh); extend(KEYS[4], ttl, fresh)
end
`;

/** A list (KEYS[3]) written now: at least ttl ms from now. */
const LIST_TTL = `
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl, 'NX'); redis.call('PEXPIRE', KEYS[3], ttl, 'GT')
end
`;

/** SET of a value (KEYS[3], ARGV[3]) with the ttl, which a SET replaces anyway. */
const SET_VALUE = `
if ttl > 0 then redis.call('SET', KEYS[3], ARGV[3], 'PX', ttl) else redis.call('SET', KEYS[3], ARGV[3]) end
`;

/** ARGV[3] JSON value. */
export const SAVE = `${PRELUDE}${EXECUTION_GUARD}${WRITE_GUARD}${SET_VALUE}${BOOKKEEPING_TTL}
return 0`;

/**
 * SAVE of a cache (the tiered store's hot write after its MySQL write), refused while KEYS[5], the
 * tombstone of this key's deletion, or KEYS[7] (when given), the tombstone of the session's,
 * exists: the write may have passed MySQL before the deletion (an execution's write just before
 * its task closed, or before its conversation was deleted) and would put the deleted key back for
 * its TTL. Its value is dropped too, so Redis holds nothing for the key meanwhile and reads go to
 * MySQL, which orders the write and the deletion. A refused write leaves Redis empty as the
 * deletion did, so it renews the tombstones for the time they were set for (their value, ms): a
 * refill that read MySQL before this write and lands after the first tombstone lapsed would
 * otherwise put the older value back. KEYS[6] (when given) the key's `_writing` set, from which
 * the write's token ARGV[10] goes either way: its Redis half is done. A write whose token is no
 * longer there with a deadline ahead (`late`: its writer was paused past the deadline, readers
 * took it for gone and removed its token, or Redis restarted since) is refused the same way, with
 * no tombstone to renew: by then the key may have been deleted and its tombstone lapsed (an agent
 * stopped after its agent session's MySQL commit, woken after its task closed and removed it).
 * 0 written, 1 refused.
 */
export const SAVE_CACHED = `${PRELUDE}
local late = false
if KEYS[6] and ARGV[10] ~= '' then
  local deadline = redis.call('ZSCORE', KEYS[6], ARGV[10])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  late = not deadline or tonumber(deadline) <= now
  redis.call('ZREM', KEYS[6], ARGV[10])
end
local gone = redis.call('GET', KEYS[5])
local sessionGone = KEYS[7] and redis.call('GET', KEYS[7])
if late or gone or sessionGone then
  if owner == ARGV[1] then redis.call('DEL', KEYS[3]) end
  for k, v in pairs({[5] = gone, [7] = sessionGone}) do
    local ms = v and tonumber(v)
    if ms and ms > 1 then redis.call('PEXPIRE', KEYS[k], math.floor(ms), 'GT') end
  end
  return 1
end
${WRITE_GUARD}${SET_VALUE}${BOOKKEEPING_TTL}
return 0`;

/**
 * Refused by a refill while either tombstone exists (KEYS[5] the session's, KEYS[6] the key's):
 * the session or the key was deleted after the refill's durable read may have been made, so what
 * it carries may be gone. Refused too while a durable write of the key is under way or was lost
 * (KEYS[7], its `_writing` set): the read may predate that write's commit, whose Redis half, if
 * it comes, may come first; reads meanwhile go to MySQL.
 */
const NOT_DELETED = `${UNDER_WAY}
if redis.call('EXISTS', KEYS[5], KEYS[6]) > 0 then return 0 end
if KEYS[7] and under_way(KEYS[7]) ~= 'none' then return 0 end
`;

/**
 * A cache refill from the durable store: sets only where Redis holds nothing for the key (1 set,
 * 0 not). A value there was written after the durable read the refill carries (a writer updates
 * MySQL, then Redis) and must not be replaced by it; nor is a session deleted meanwhile refilled.
 */
export const FILL = `${PRELUDE}
if owner and owner ~= ARGV[1] then return -1 end
${NOT_DELETED}${epochHolds('KEYS[8]', 'ARGV[8]')}
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
${WRITE_GUARD}${SET_VALUE}${BOOKKEEPING_TTL}
return 1`;

/** Sets only when absent anywhere; 1 created, 0 exists (-2 first for the owner's stale fence). */
export const CREATE = `${PRELUDE}${EXECUTION_GUARD}
if redis.call('EXISTS', KEYS[3]) == 1 then
  if owner == ARGV[1] and ARGV[7] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[7] then return -2 end
  return 0
end
${WRITE_GUARD}${SET_VALUE}${BOOKKEEPING_TTL}
return 1`;

/**
 * Appends to a ZSET scored by index; member "<index>|<json>". ARGV[8] explicit index or ''.
 * ARGV[9] '1' = the list is authoritative (standalone: a new list is complete, marked by the
 * sentinel member '!' at score 0); '0' = cache mode (no sentinel: only a full refill marks it).
 */
export const APPEND = `${PRELUDE}${EXECUTION_GUARD}${WRITE_GUARD}
local idx
if ARGV[8] ~= '' then
  idx = tonumber(ARGV[8])
  if redis.call('ZCOUNT', KEYS[3], idx, idx) > 0 then return -3 end
else
  local top = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  idx = (top[2] and tonumber(top[2]) or 0) + 1
end
if ARGV[9] == '1' and redis.call('EXISTS', KEYS[3]) == 0 then redis.call('ZADD', KEYS[3], 0, '!') end
redis.call('ZADD', KEYS[3], idx, idx .. '|' .. ARGV[3])
${LIST_TTL}${BOOKKEEPING_TTL}
return idx`;

/**
 * APPEND of a cache (the tiered store's hot write after its MySQL write, which chose the index
 * ARGV[8]): -3 when a refill cached that index already. KEYS[5] the key's `_writing` set, from
 * which the write's token ARGV[9] goes either way: its Redis half is done. Refused (0) while
 * KEYS[6], the tombstone of the session's deletion, lasts: the append may have passed MySQL
 * before the deletion, and its item would stay in Redis for the list's TTL, a deleted
 * conversation's message kept (and, were the id written again, counted in a refilled list). The
 * list's copy goes instead, as SAVE_CACHED's value does, and the tombstone is renewed. An append
 * whose token is no longer there with a deadline ahead (`late`, as in SAVE_CACHED: its process was
 * stopped past the deadline, by when the conversation may have been deleted and its tombstone
 * lapsed) is refused the same way, with no tombstone to renew.
 */
export const APPEND_CACHED = `${PRELUDE}
local late = false
if ARGV[9] ~= '' then
  local deadline = redis.call('ZSCORE', KEYS[5], ARGV[9])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  late = not deadline or tonumber(deadline) <= now
  redis.call('ZREM', KEYS[5], ARGV[9])
end
local sessionGone = KEYS[6] and redis.call('GET', KEYS[6])
if late or sessionGone then
  if owner == ARGV[1] then redis.call('DEL', KEYS[3]) end
  local ms = sessionGone and tonumber(sessionGone)
  if ms and ms > 1 then redis.call('PEXPIRE', KEYS[6], math.floor(ms), 'GT') end
  return 0
end
${WRITE_GUARD}
local idx = tonumber(ARGV[8])
if redis.call('ZCOUNT', KEYS[3], idx, idx) > 0 then return -3 end
redis.call('ZADD', KEYS[3], idx, idx .. '|' .. ARGV[3])
${LIST_TTL}${BOOKKEEPING_TTL}
return idx`;

/**
 * Refills a list from the durable store, a page per call: ARGV[7..] are index/member pairs;
 * ARGV[3] '1' on the last page marks the list complete (the sentinel '!'), so a list whose fill
 * stopped midway stays a miss, and stamps it checked (see LIST_CHECKED) as of ARGV[6] (ms, Redis's
 * clock, when the read that refills it missed: its durable read came after; '' none); ARGV[5] the
 * refill's epoch (KEYS[8], see EPOCH_MS), which each page keeps alive. 1 done, 0 refused (the
 * session was deleted, or Redis restarted: see EPOCH_MS).
 */
export const FILL_LIST = `${PRELUDE}
if owner and owner ~= ARGV[1] then return -1 end
${NOT_DELETED}${epochHolds('KEYS[8]', 'ARGV[5]')}
if KEYS[8] then redis.call('PEXPIRE', KEYS[8], ${EPOCH_MS}) end
local fresh = not owner
if fresh then redis.call('HSET', KEYS[1], 'tenant', ARGV[1]) end
local indexFresh = redis.call('EXISTS', KEYS[2]) == 0
redis.call('SADD', KEYS[2], ARGV[2])
local ttl = tonumber(ARGV[4])
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[3], 0, '!')
  local at = tonumber(ARGV[6])
  local was = tonumber(redis.call('HGET', KEYS[1], 'v:' .. ARGV[2]))
  if at and (not was or was < at) then redis.call('HSET', KEYS[1], 'v:' .. ARGV[2], ARGV[6]) end
end
for i = 7, #ARGV, 2 do redis.call('ZADD', KEYS[3], tonumber(ARGV[i]), ARGV[i + 1]) end
${LIST_TTL}${BOOKKEEPING_TTL}
return 1`;

/**
 * Value of one key for its owner; ARGV[2] sliding ttl ms (0: none). Returns false when absent/foreign
 * (in a cache also when a write of the key was lost: KEYS[5]); a miss of a read that may refill
 * (KEYS[6], the session's `_epoch`, ARGV[3] a new epoch) returns { epoch } instead (see EPOCH_MS).
 */
export const GET = `${PRELUDE}${UNDER_WAY}${epochOnMiss('ARGV[3]')}
local function miss()
  local e = epoch()
  if e then return {e} end
  return false
end
if KEYS[5] and under_way(KEYS[5]) == 'lost' then redis.call('DEL', KEYS[3]); return miss() end
if owner and owner ~= ARGV[1] then return false end
if not owner then return miss() end
local v = redis.call('GET', KEYS[3])
if not v then return miss() end
local slide = tonumber(ARGV[2])
-- an absent marker (it starts with a NUL byte, which JSON never does) keeps its own short TTL
if v and slide > 0 and string.byte(v, 1) ~= 0 then redis.call('PEXPIRE', KEYS[3], slide); redis.call('PEXPIRE', KEYS[1], slide, 'GT'); redis.call('PEXPIRE', KEYS[2], slide, 'GT') end
return v`;

/**
 * A range of a list for its owner: ARGV[2] after index, ARGV[3] last N (-1 none), ARGV[4] limit (-1 none),
 * ARGV[5] '1' = treat a gap in the indexes as a miss (cache mode), ARGV[6] sliding ttl ms (0: none;
 * a hit extends the list as GET extends a value: the conversation's log slides with it).
 * Returns { complete(0/1), members… }; complete is 0 when the list is not known whole (cache miss,
 * or a write of it was lost: KEYS[5]), and a miss of a read that may refill (KEYS[6], the
 * session's `_epoch`, ARGV[7] a new epoch) is { 0, epoch, now ms } (see EPOCH_MS). ARGV[8] (ms,
 * with ARGV[9] the state key; a read that may refill): a complete list last checked against the
 * durable store longer ago than that (see LIST_CHECKED) answers { 2, now ms, last index, members… }.
 */
export const GET_LIST = `${PRELUDE}${UNDER_WAY}${epochOnMiss('ARGV[7]')}
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function miss()
  local e = epoch()
  if e then return {0, e, clock()} end
  return {0}
end
if KEYS[5] and under_way(KEYS[5]) == 'lost' then redis.call('DEL', KEYS[3]); return miss() end
if owner and owner ~= ARGV[1] then return {0} end
if not owner then return miss() end
local complete = 0
local last = 0
if redis.call('ZSCORE', KEYS[3], '!') then
  -- indexes are contiguous from 1: a gap means a hot write was missed, so it is a miss
  complete = 1
  local top = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  last = tonumber(top[2])
  if ARGV[5] == '1' and last ~= redis.call('ZCARD', KEYS[3]) - 1 then complete = 0 end
end
if complete == 0 then return miss() end
local head = {complete}
local checkMs = tonumber(ARGV[8] or '0')
if checkMs > 0 then
  local now = clock()
  local at = tonumber(redis.call('HGET', KEYS[1], 'v:' .. ARGV[9]))
  if not at or at + checkMs <= now then head = {2, now, last} end
end
local slide = tonumber(ARGV[6] or '0')
if complete == 1 and slide > 0 then
  redis.call('PEXPIRE', KEYS[3], slide); redis.call('PEXPIRE', KEYS[1], slide, 'GT'); redis.call('PEXPIRE', KEYS[2], slide, 'GT')
end
local after = '(' .. ARGV[2]
local items
if tonumber(ARGV[3]) >= 0 then
  items = redis.call('ZREVRANGEBYSCORE', KEYS[3], '+inf', after, 'LIMIT', 0, tonumber(ARGV[3]))
  local n = #items
  for i = 1, math.floor(n / 2) do items[i], items[n - i + 1] = items[n - i + 1], items[i] end
  if tonumber(ARGV[4]) >= 0 then
    local cut = {}
    for i = 1, math.min(#items, tonumber(ARGV[4])) do cut[i] = items[i] end
    items = cut
  end
elseif tonumber(ARGV[4]) >= 0 then
  items = redis.call('ZRANGEBYSCORE', KEYS[3], after, '+inf', 'LIMIT', 0, tonumber(ARGV[4]))
else
  items = redis.call('ZRANGEBYSCORE', KEYS[3], after, '+inf')
end
for i = #head, 1, -1 do table.insert(items, 1, head[i]) end
return items`;

/**
 * Last index of a list for its owner, or -1 when the list is not known whole (ARGV[2] '1': cache
 * mode; KEYS[5] its `_writing` set), or (ARGV[3] ms, ARGV[4] the state key) was last checked
 * against the durable store longer ago than that (see LIST_CHECKED).
 */
export const LIST_LENGTH = `${PRELUDE}${UNDER_WAY}${lostWriteMiss('-1')}
if owner ~= ARGV[1] then return ARGV[2] == '1' and -1 or 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then return ARGV[2] == '1' and -1 or 0 end
if not redis.call('ZSCORE', KEYS[3], '!') then return -1 end
local top = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
local last = top[2] and tonumber(top[2]) or 0
if ARGV[2] == '1' and last ~= redis.call('ZCARD', KEYS[3]) - 1 then return -1 end
local checkMs = tonumber(ARGV[3] or '0')
if checkMs > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local at = tonumber(redis.call('HGET', KEYS[1], 'v:' .. ARGV[4]))
  if not at or at + checkMs <= now then return -1 end
end
return last`;

/**
 * Stamps a cache's list (the `v:<key>` field of KEYS[1], `_meta`; ARGV[2] the state key) checked
 * as of ARGV[3] (ms, Redis's clock), never back: up to then, Redis held every item the durable
 * store did. A writer whose Redis half missed and whose record of the write never reached Redis
 * (it could not reach Redis at all) leaves no trace here; readers check a list whose stamp is
 * older than the tiered store's listVerifyMs against the durable store's last index, and stamp it
 * again when they agree, so such a write is unseen at most that long. Only for the owner ARGV[1].
 */
export const LIST_CHECKED = `
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return 0 end
local was = tonumber(redis.call('HGET', KEYS[1], 'v:' .. ARGV[2]))
if not was or was < tonumber(ARGV[3]) then redis.call('HSET', KEYS[1], 'v:' .. ARGV[2], ARGV[3]) end
return 1`;

/**
 * Marks a key absent (cache mode): the durable store holds no value for it. Only in a session the
 * tenant already owns here and only where the key holds nothing, so it never claims a session,
 * never hides a write that landed first and is overwritten by the next write. Not while KEYS[5],
 * the tombstone of the key's deletion, exists: a save then leaves Redis empty (SAVE_CACHED), so a
 * marker of a read made before that save's MySQL write would hide it. The key joins the _keys
 * index (given a TTL when this creates it), so purging or deleting the session drops the marker too. Nor while a write of the key is
 * under way or was lost (KEYS[6], its `_writing` set), as for a refill, nor while the tombstone of
 * the session's deletion (KEYS[7]) lasts (a save then leaves Redis empty too), nor when the epoch
 * of the read that missed (ARGV[5]) is not the session's (KEYS[8], see EPOCH_MS). ARGV[2] marker,
 * ARGV[3] ttl ms, ARGV[4] state key.
 */
export const MARK_ABSENT = `${PRELUDE}${UNDER_WAY}
if owner ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[5], KEYS[7]) > 0 then return 0 end
if under_way(KEYS[6]) ~= 'none' then return 0 end
${epochHolds('KEYS[8]', 'ARGV[5]')}
if not redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', tonumber(ARGV[3])) then return 0 end
-- An index created here (every key it listed was deleted) lasts as the session's _meta does,
-- and at least as the marker: SADD made it without a TTL.
if redis.call('SADD', KEYS[2], ARGV[4]) == 1 and redis.call('PTTL', KEYS[2]) == -1 then
  redis.call('PEXPIRE', KEYS[2], math.max(tonumber(ARGV[3]), redis.call('PTTL', KEYS[1])))
end
return 1`;

/**
 * Records a cache's durable write of a key as under way, before it starts: ARGV[1] its token,
 * deadline ARGV[2] ms from now (Redis's clock), by when its Redis half (which removes the token)
 * must have come, or readers drop what is cached of the key (see UNDER_WAY). KEYS[1] the key's
 * `_writing` set, which lasts ARGV[3] ms (the key's own TTL, at least twice the deadline). ARGV[4]
 * '1' also drops the cached copy (KEYS[2] value, KEYS[3] list) at once: the write failed without
 * saying whether MySQL committed it, and a late commit must find nothing cached that lacks it.
 * Nothing (0) when the session is cached as another tenant's than ARGV[5] (KEYS[4] its `_meta`).
 */
export const MARK_WRITING = `
local owner = redis.call('HGET', KEYS[4], 'tenant')
if owner and owner ~= ARGV[5] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local keep = math.max(tonumber(ARGV[3]), 2 * tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], keep, 'NX'); redis.call('PEXPIRE', KEYS[1], keep, 'GT')
if ARGV[4] == '1' then redis.call('DEL', KEYS[2], KEYS[3]) end
return 1`;

/**
 * Leaves deletion tombstones (KEYS[3..], see markDeleted) for ARGV[1] ms, their value that
 * duration, and ends the session's refill epoch (KEYS[2], `_epoch`): a refill whose read missed
 * before the deletion is refused however late it comes, not only while the tombstones last (its
 * process paused past them, the epoch kept alive by the session's other misses). Nothing (0) when
 * the session is cached as another tenant's (ARGV[2] is the deleter).
 */
export const MARK_DELETED = `${PRELUDE}
if owner and owner ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[2])
for i = 3, #KEYS do redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[1]) end
return 1`;

/**
 * Deletes the listed state keys (KEYS[3..]) of a session owned by ARGV[1]; ARGV[2..] their names,
 * whose bookkeeping in `_meta` goes with them (u:, and v: the stamp of a list's last check, see
 * LIST_CHECKED).
 */
export const DELETE_KEYS = `${PRELUDE}
if owner ~= ARGV[1] then return 0 end
for i = 3, #KEYS do redis.call('DEL', KEYS[i]) end
for i = 2, #ARGV do
  redis.call('SREM', KEYS[2], ARGV[i]); redis.call('HDEL', KEYS[1], 'u:' .. ARGV[i], 'v:' .. ARGV[i])
end
return 1`;

/**
 * The next fencing token for the session's owner (-1 for another tenant). Issued where the session
 * holds nothing else, it makes the session a `remnant` whose owner and fence lapse ARGV[2] ms
 * later (as MySQL's fence alone), unless it is written again first.
 */
export const NEXT_FENCE = `${PRELUDE}
if owner and owner ~= ARGV[1] then return -1 end
if not owner then redis.call('HSET', KEYS[1], 'tenant', ARGV[1]) end
local n = redis.call('INCR', KEYS[4])
if redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[1], 'remnant', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2]); redis.call('PEXPIRE', KEYS[4], ARGV[2])
end
return n`;

/**
 * The end of a standalone session's deletion (its state keys are gone): drops its bookkeeping,
 * but keeps its owner and fencing counter, when it has one, for ARGV[2] ms (a `remnant`), so a
 * holder paused across the deletion stays fenced out when the id is locked again.
 */
export const LEAVE_FENCE = `${PRELUDE}
if owner ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
if redis.call('EXISTS', KEYS[4]) == 0 then return 1 end
redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'remnant', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[2]); redis.call('PEXPIRE', KEYS[4], ARGV[2])
return 1`;
