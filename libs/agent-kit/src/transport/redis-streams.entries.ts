import { RpcException, WritePacket } from '@nestjs/microservices';
import { pickMdc } from '@loom/observability';
import { isCluster, RedisClient } from '@loom/session';
import {
  CONSUMER_GROUP,
  DEAD_LETTER_MAXLEN,
  DEFAULTS,
  REPLY_MAXLEN,
  REPLY_TTL_MS,
  replyStreamKey,
  requestStreamKey,
} from './redis-streams.options';
import { entryMs } from './redis-streams.send-by';
import { errorMessage, sleep } from './redis-streams.util';

/** One request (or event) entry read from a pattern's stream. */
export interface Entry {
  key: string;
  pattern: string;
  entryId: string;
  /**
   * `id`, `replyTo`, `deadline` (epoch ms: the caller waits no longer), `data` (JSON), and from
   * callers that wait on progress `startBy` (epoch ms: by then the caller has given up on a
   * request nobody started) and `progressMs` (how often to report progress); events carry
   * `id` (their send-once marker's) and `data` only. Both times are on the SharedClock (Redis's time), as `now` must be when they
   * are compared: the caller's and the agent's hosts may disagree by minutes. `sendBy` (ms on
   * Redis's clock, see SendBy) from callers that had learnt it.
   */
  fields: Record<string, string>;
  deliveryCount: number;
}

export type Multi = ReturnType<RedisClient['multi']>;

export function deadlineOf(entry: Entry): number {
  const deadline = Number(entry.fields.deadline ?? Infinity);
  return Number.isNaN(deadline) ? Infinity : deadline;
}

/** Past its deadline at `now` (SharedClock). */
export function isExpired(entry: Entry, now: number): boolean {
  return deadlineOf(entry) < now;
}

/** When the caller stops waiting for a request that showed no sign of life: its deadline at most. */
export function startByOf(entry: Entry): number {
  const startBy = Number(entry.fields.startBy ?? NaN);
  return Number.isNaN(startBy) ? deadlineOf(entry) : Math.min(startBy, deadlineOf(entry));
}

/**
 * A request first delivered after its caller gave up on it (it waited in the stream with no
 * sign of life for the caller's whole silence bound). A redelivery is not judged by this: its
 * first delivery may have reported progress, and the caller may still wait, up to the deadline.
 */
export function isStale(entry: Entry, now: number): boolean {
  return (
    isExpired(entry, now) ||
    landedLate(entry) ||
    (entry.deliveryCount <= 1 && startByOf(entry) < now)
  );
}

/**
 * Redis added the request after its `sendBy` (see SendBy): its XADD had already failed its
 * command time-out, and its caller was told UNAVAILABLE (and may have retried it).
 */
export function landedLate(entry: Entry): boolean {
  const sendBy = Number(entry.fields.sendBy ?? NaN);
  return Number.isFinite(sendBy) && entryMs(entry.entryId) > sendBy;
}

/**
 * A client's id as a reply stream's name may carry it (RedisStreamsClient's: 32 hex digits): no
 * `:` or braces, so the name stays a reply stream's, never another kind of key under the prefix.
 */
const CLIENT_ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * The reply stream a request names, when it is one a client of this transport reads: a reply
 * stream under the request stream's own key prefix. Else undefined: a malformed or hostile entry
 * must not make an agent write into any other key (another prefix's streams, a session's data).
 */
export function replyToOf(entry: Entry): string | undefined {
  const replyTo = entry.fields.replyTo;
  if (!replyTo) return undefined;
  const tail = requestStreamKey('', entry.pattern);
  if (!entry.key.endsWith(tail)) return undefined;
  const prefix = replyStreamKey(entry.key.slice(0, entry.key.length - tail.length), '');
  return replyTo.startsWith(prefix) && CLIENT_ID.test(replyTo.slice(prefix.length))
    ? replyTo
    : undefined;
}

/** How often the caller wants progress reports (ms), or undefined when it wants none. */
export function progressMsOf(entry: Entry): number | undefined {
  const ms = Number(entry.fields.progressMs ?? NaN);
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}

/** Errors as Nest sends them: the RpcException's object (or `{ status, message }`). */
export function serializeError(err: unknown): unknown {
  if (err instanceof RpcException) {
    const inner = err.getError();
    return typeof inner === 'object' && inner !== null
      ? inner
      : { status: 'error', message: inner };
  }
  if (err instanceof Error) return { status: 'error', message: err.message };
  return err;
}

/**
 * Queues the reply packet `{ id, response?, err?, isDisposed?, seq? }`; with `last`, also XACK +
 * XDEL. `seq` names the packet among its delivery's (see writeReply).
 */
export function appendReply(
  tx: Multi,
  entry: Entry,
  packet: WritePacket,
  last: boolean,
  seq?: string,
): Multi {
  const replyTo = replyToOf(entry);
  if (replyTo) {
    tx.xadd(replyTo, 'MAXLEN', '~', REPLY_MAXLEN, '*', ...replyFields(entry, packet, last, seq));
    tx.pexpire(replyTo, REPLY_TTL_MS);
  }
  return last ? appendFinish(tx, entry) : tx;
}

/** The fields of a reply entry: `id`, and `response`, `err`, `isDisposed` as the packet has them. */
function replyFields(entry: Entry, packet: WritePacket, last: boolean, seq?: string): string[] {
  const args: string[] = ['id', entry.fields.id ?? ''];
  if (seq !== undefined) args.push('seq', seq);
  let err = packet.err === undefined ? undefined : serializeError(packet.err);
  if (packet.response !== undefined) {
    try {
      args.push('response', JSON.stringify(packet.response));
    } catch {
      err ??= { status: 'error', message: 'The response is not serializable' };
    }
  }
  if (err !== undefined) args.push('err', JSON.stringify(err));
  if (packet.isDisposed || last) args.push('isDisposed', '1');
  return args;
}

/**
 * Queues a progress report `{ id, progress: 1 }` on the caller's reply stream (and keeps the
 * stream from expiring while an execution outlasts the reply TTL).
 */
export function appendProgress(tx: Multi, entry: Entry): Multi {
  const replyTo = replyToOf(entry);
  if (!replyTo) return tx;
  tx.xadd(replyTo, 'MAXLEN', '~', REPLY_MAXLEN, '*', 'id', entry.fields.id ?? '', 'progress', '1');
  return tx.pexpire(replyTo, REPLY_TTL_MS);
}

/** Queues XACK + XDEL: the entry is done and leaves its stream. */
export function appendFinish(tx: Multi, entry: Entry): Multi {
  return tx.xack(entry.key, CONSUMER_GROUP, entry.entryId).xdel(entry.key, entry.entryId);
}

/**
 * Settles a delivered entry once: XACK, and only when that acknowledged it (it was still
 * pending), XDEL, the entry's copy on KEYS[2] and, with KEYS[3], the reply there. ioredis sends a
 * command again after a reconnect when its connection dropped before the answer: a MULTI that
 * had run (a reset right after it) ran twice, and left a second copy. Run again, this adds
 * nothing and returns 0.
 * With a retention (a dead-letter copy), the copy's stream drops its entries added longer ago
 * (MINID, on Redis's clock, as entry ids are) and expires once the copy is that old.
 * KEYS: the request stream, where the copy goes (its slot: `{pattern}`), the reply stream
 * (standalone only: another slot). ARGV: the group, the entry id, the copy's MAXLEN ('0': none),
 * the reply stream's MAXLEN and TTL (ms), the copy's retention (ms, '0': none), how many copy
 * arguments follow, the copy's fields, the reply's fields.
 */
const SETTLE_ONCE = `
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
local n = tonumber(ARGV[7])
local copy = {unpack(ARGV, 8, 7 + n)}
if ARGV[3] == '0' then
  redis.call('XADD', KEYS[2], '*', unpack(copy))
else
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(copy))
end
if ARGV[6] ~= '0' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('XTRIM', KEYS[2], 'MINID', math.max(0, now - tonumber(ARGV[6])))
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
if KEYS[3] then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, 8 + n))
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
return 1`;

/**
 * Acknowledges and deletes a delivered entry and adds `copy` to `copyKey` (MAXLEN ~`maxLen`, 0
 * none; kept `retentionMs` at most, when given), and `reply` to the caller's reply stream when
 * given, in one script (SETTLE_ONCE): all of it once, whether ioredis sends it again or the
 * caller retries it.
 */
async function settleOnce(
  cmd: RedisClient,
  entry: Entry,
  copy: { key: string; maxLen: number; retentionMs?: number; fields: string[] },
  reply?: { key: string; fields: string[] },
): Promise<void> {
  const keys = [entry.key, copy.key, ...(reply ? [reply.key] : [])];
  await cmd.eval(
    SETTLE_ONCE,
    keys.length,
    ...keys,
    ...[CONSUMER_GROUP, entry.entryId, copy.maxLen, REPLY_MAXLEN, REPLY_TTL_MS],
    Math.max(0, Math.floor(copy.retentionMs ?? 0)),
    copy.fields.length,
    ...copy.fields,
    ...(reply?.fields ?? []),
  );
}

/**
 * Returns a delivered entry to its stream as a new entry (its fields as the client wrote them),
 * with XACK + XDEL of the delivered one: undelivered again, for any consumer's next read. Once
 * (SETTLE_ONCE): a second copy, added by a write sent again after a lost answer, was run twice.
 */
export async function requeueEntry(cmd: RedisClient, entry: Entry): Promise<void> {
  // The copy is added later by design: its `sendBy` went with the original, checked (or late).
  const fields = Object.entries(entry.fields).filter(([f]) => f !== 'sendBy' || landedLate(entry));
  return settleOnce(cmd, entry, { key: entry.key, maxLen: 0, fields: fields.flat() });
}

/**
 * The entry's copy on the dead-letter stream (the request's slot: `{pattern}`): its fields but
 * `data`, which becomes `ref`, a reference to the request. The stream keeps about the latest
 * DEAD_LETTER_MAXLEN copies, each for `retentionMs` at most, so it must not keep what the
 * request carried (the signed assignment, the conversation's text): DELETE of a conversation,
 * or its expiry, removes that everywhere else.
 */
function deadCopy(entry: Entry, deadKey: string, reason: string, retentionMs: number) {
  const kept = Object.entries(entry.fields).filter(([f]) => f !== 'data');
  const fields = [...kept.flat(), 'entryId', entry.entryId, 'ref', deadReference(entry)];
  return {
    key: deadKey,
    maxLen: DEAD_LETTER_MAXLEN,
    retentionMs,
    fields: [...fields, 'reason', reason],
  };
}

/** Ids an assignment names, and how a reference keeps them: well-formed only. */
const ASSIGNMENT_IDS = [
  'tenantId',
  'userId',
  'conversationId',
  'taskId',
  'agentSessionId',
  'agentType',
] as const;
const REF_ID = /^[A-Za-z0-9_.@|:+-]{1,128}$/;
/** Longer `data` is not parsed for its ids (the transport refuses it anyway). */
const MAX_REF_PARSE_CHARS = 1_000_000;

/**
 * What a dead-letter copy keeps of a request's `data`: the assignment's ids (not its signature
 * nor expiry), the MDC ids of its `meta`, and its length; the rest, the conversation's text
 * included, is dropped.
 */
function deadReference(entry: Entry): string {
  const raw = entry.fields.data ?? '';
  let data: { assignment?: unknown; meta?: unknown } | undefined;
  if (raw.length <= MAX_REF_PARSE_CHARS) {
    try {
      const parsed: unknown = JSON.parse(raw);
      if (parsed && typeof parsed === 'object') data = parsed as typeof data;
    } catch {
      // Not JSON: only its length is kept.
    }
  }
  const source = (data?.assignment ?? {}) as Record<string, unknown>;
  const assignment = Object.fromEntries(
    ASSIGNMENT_IDS.flatMap((f) => {
      const v = typeof source === 'object' && source ? source[f] : undefined;
      return typeof v === 'string' && REF_ID.test(v) ? [[f, v]] : [];
    }),
  );
  const meta = pickMdc(data?.meta);
  return JSON.stringify({
    ...(Object.keys(assignment).length ? { assignment } : {}),
    ...(Object.keys(meta).length ? { meta } : {}),
    dataChars: raw.length,
  });
}

function deadLetteredPacket(entry: Entry, reason: string): WritePacket {
  const message = `Request ${entry.fields.id} was dead-lettered: ${reason}`;
  return { err: { code: 'DEAD_LETTERED', message }, isDisposed: true };
}

/**
 * Writes a reply packet and, when `last`, acknowledges and deletes the entry. Standalone: one
 * MULTI. On a cluster the reply stream and the request stream sit in different slots, which no
 * MULTI spans, so the reply goes first and XACK + XDEL follow in the request's slot: a crash
 * between the two leaves the entry pending, to be redelivered and answered again (executions
 * are idempotent by agentSessionId), and the caller ignores a reply to a call it has settled.
 * `seq` (unique per packet) lets the caller drop a packet it has had: ioredis sends a write
 * again after a reset that lost its answer, and a streamed answer's value reached it twice.
 */
export async function writeReply(
  cmd: RedisClient,
  entry: Entry,
  packet: WritePacket,
  last: boolean,
  seq?: string,
): Promise<void> {
  if (!isCluster(cmd)) return execOrThrow(appendReply(cmd.multi(), entry, packet, last, seq));
  // A last reply may go twice (a retry after a lost answer): the caller settles on the first.
  // A delta or progress report is tried again only when the cluster surely did not run it.
  if (replyToOf(entry))
    await retryOnCluster(cmd, () => appendReply(cmd.multi(), entry, packet, false, seq), !last);
  if (last) await retryOnCluster(cmd, () => appendFinish(cmd.multi(), entry), false);
}

/** How often a cluster's write of a reply, or of XACK + XDEL after it, is tried (about 15 s in all). */
const CLUSTER_WRITE_ATTEMPTS = 20;
/** What a cluster answers when it ran none of a MULTI: a master restarting, failing over or busy. */
const NOT_RUN = /^(CLUSTERDOWN|TRYAGAIN|BUSY|LOADING|MASTERDOWN|EXECABORT)\b/;

/**
 * A cluster's MULTI, tried again while its master is briefly away (a restart, a failover, a busy
 * script): the reply must reach the caller and the XACK + XDEL must follow it, or the entry,
 * left pending, is reclaimed and its work run again. `onlyNotRun`: tried again only on an
 * answer that says nothing ran (a write that must not go twice); else on any error. After the
 * last attempt the error stands (at-least-once: the entry stays pending).
 */
async function retryOnCluster(
  cmd: RedisClient,
  tx: () => Multi | Promise<void>,
  onlyNotRun: boolean,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      const write = tx();
      return await (write instanceof Promise ? write : execOrThrow(write));
    } catch (err) {
      const again = !onlyNotRun || NOT_RUN.test(errorMessage(err));
      if (!again || attempt >= CLUSTER_WRITE_ATTEMPTS || cmd.status === 'end') throw err;
      await sleep(Math.min(100 * attempt, 1000));
    }
  }
}

/**
 * Dead-letters an entry: the copy, the `DEAD_LETTERED` reply, XACK and XDEL, once (SETTLE_ONCE:
 * a write sent again, or retried, after a lost answer adds nothing, so the dead-letter stream,
 * and `loom_dead_letters`, hold each request once). Standalone: one script. On a cluster the
 * reply first (its stream is in another slot), tried again as in writeReply (the caller settles
 * on the first), then the copy with XACK + XDEL (the dead-letter stream shares the request
 * stream's hash tag). The copies there added more than `retentionMs` ago go with it, and the
 * stream expires once this copy is that old (see trimDeadLetters for a stream nobody writes).
 */
export async function writeDeadLetter(
  cmd: RedisClient,
  entry: Entry,
  deadKey: string,
  reason: string,
  retentionMs: number = DEFAULTS.deadLetterRetentionMs,
): Promise<void> {
  const packet = deadLetteredPacket(entry, reason);
  const replyTo = replyToOf(entry);
  const copy = deadCopy(entry, deadKey, reason, retentionMs);
  if (!isCluster(cmd)) {
    const reply = replyTo ? { key: replyTo, fields: replyFields(entry, packet, true) } : undefined;
    return settleOnce(cmd, entry, copy, reply);
  }
  if (replyTo)
    await retryOnCluster(cmd, () => appendReply(cmd.multi(), entry, packet, false), false);
  await retryOnCluster(cmd, () => settleOnce(cmd, entry, copy), false);
}

/** Runs a MULTI and throws the first command error (exec() only reports them). */
export async function execOrThrow(tx: Multi): Promise<void> {
  const results = await tx.exec();
  const failed = results?.find(([err]) => err);
  if (failed) throw failed[0];
}

/**
 * Drops the copies a dead-letter stream got more than the retention ago (ARGV[1], ms; MINID on
 * the clock of the server holding it, as entry ids are), and has the stream expire once its
 * newest copy is that old: a stream its agents no longer write (a quiet week, a type stopped for
 * good) keeps no copy past the retention. Returns how many copies went.
 */
const TRIM_DEAD = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retention = tonumber(ARGV[1])
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', math.max(0, now - retention))
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if newest then
  local ms = tonumber(string.match(newest[1], '^(%d+)'))
  redis.call('PEXPIRE', KEYS[1], math.max(1, ms + retention - now))
else
  redis.call('DEL', KEYS[1])
end
return trimmed`;

/** Keeps the dead-letter stream `deadKey` to the copies of the last `retentionMs` (TRIM_DEAD). */
export async function trimDeadLetters(
  cmd: RedisClient,
  deadKey: string,
  retentionMs: number,
): Promise<number> {
  return Number(await cmd.eval(TRIM_DEAD, 1, deadKey, Math.max(1, Math.floor(retentionMs))));
}

/**
 * Deletes, among up to ARGV[2] copies of a dead-letter stream from ARGV[1] on (an XRANGE start),
 * those that carry `data`: the request whole, as versions before the reference (deadCopy) wrote
 * them. Returns the last id looked at ('' at the end) and how many went.
 */
const SCRUB_DEAD = `
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
local deleted = 0
for _, e in ipairs(entries) do
  local fields = e[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'data' then
      deleted = deleted + redis.call('XDEL', KEYS[1], e[1])
      break
    end
  end
end
local last = ''
if #entries == tonumber(ARGV[2]) then last = entries[#entries][1] end
return {last, deleted}`;
const SCRUB_BATCH = 500;

/**
 * Deletes the copies of the dead-letter stream `deadKey` that keep the request's `data` (its
 * signed assignment, the conversation's text), written by versions before the reference: they
 * cannot be rewritten in place (a stream entry's fields are fixed, and a copy added again would
 * come out of order, its age restarted). A batch of SCRUB_BATCH per round trip. Returns how many
 * went.
 */
export async function scrubDeadLetterData(cmd: RedisClient, deadKey: string): Promise<number> {
  let deleted = 0;
  for (let from = '-'; ;) {
    const [last, n] = (await cmd.eval(SCRUB_DEAD, 1, deadKey, from, SCRUB_BATCH)) as [
      string,
      number,
    ];
    deleted += Number(n);
    if (!last) return deleted;
    from = `(${last}`;
  }
}
