import { randomBytes } from 'crypto';
import { LRUCache } from 'lru-cache';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { assertId, assertStateKey } from '../../ids';
import {
  ABSENT,
  RedisSessionStore,
  RefillEpoch,
  UncheckedList,
} from '../redis/redis-session.store';
import {
  AppendOptions,
  ListItem,
  ListRange,
  SessionStore,
  SessionSummary,
  StoreScope,
  WriteOptions,
} from '../session-store';
import { DEFAULT_GUARD, HotTierGuard, HotTierGuardOptions } from './hot-tier-guard';
import { assertRange, toJson } from '../memory/store-rules';
import { EncodedValue } from '../codec';

export interface TtlRule {
  ttlSeconds: number;
  /** Reads extend the TTL (the conversation layer: 7 days sliding). */
  sliding: boolean;
  /**
   * false: never trusted from this process's LRU, read from Redis every time (a value another
   * process rewrites and whose lag changes what an agent is shown: the summary).
   */
  lru?: boolean;
}

export interface TieredOptions {
  /** Hot TTL per state key (seed 000: conversation 7 d sliding, task 24 h, agent 1 h). */
  ttlFor: (stateKey: string) => TtlRule;
  lruMax?: number;
  /** How long a process trusts its own LRU copy of a single value (ms); 0: no LRU. */
  lruTtlMs?: number;
  guard?: HotTierGuardOptions;
  /**
   * Keys whose hot copy could not be updated, invalidated once Redis answers again. Past this
   * many, every cached session is dropped instead (a whole-cache purge, in bounded steps).
   */
  maxPendingInvalidations?: number;
  /**
   * How long a deleted session refuses refills (ms): longer than a read takes from its Redis miss
   * to its refill (a MySQL statement is abandoned after DB_QUERY_TIMEOUT_MS, 10 s).
   */
  deleteTombstoneMs?: number;
  /**
   * How long a durable write may take from its start to its Redis half (ms) before readers take
   * its writer for gone and drop what Redis holds of the key: longer than a MySQL statement may
   * run (DB_QUERY_TIMEOUT_MS, 10 s).
   */
  writeDeadlineMs?: number;
  /**
   * After a durable write failed without saying whether it committed (UNAVAILABLE: a statement
   * abandoned at its time-out may still commit), how long the key is not cached (ms).
   */
  unknownWriteHoldMs?: number;
  /**
   * While hot copies that missed writes are still to drop, how often this process tries again
   * (ms) by itself, whether or not it serves anything meanwhile.
   */
  repairRetryMs?: number;
  /**
   * How long a list cached whole is served from Redis before a read checks its last index against
   * MySQL's (ms; 0: never). A write whose Redis half missed and whose record never reached Redis
   * (its writer cut off from Redis, perhaps killed before its repair) is seen by every process at
   * most this long after it committed.
   */
  listVerifyMs?: number;
  onHotError?: (err: unknown) => void;
}

/** How long Redis may answer "absent" for a key without asking MySQL again. */
const ABSENT_TTL_SECONDS = 3600;
/** Items per MySQL read (and at most per Redis call) of a list refill. */
const FILL_PAGE_ITEMS = 200;
/** Default of `deleteTombstoneMs`. */
const DELETE_TOMBSTONE_MS = 60_000;
/** How often, at most, the LRU's stale copies are dropped (at lruTtlMs when that is longer). */
const LRU_SWEEP_MIN_MS = 1000;
/** Default of `writeDeadlineMs`. */
const WRITE_DEADLINE_MS = 15_000;
/** Default of `unknownWriteHoldMs`. */
const UNKNOWN_WRITE_HOLD_MS = 600_000;
/** Default of `repairRetryMs`. */
const REPAIR_RETRY_MS = 1000;
/** Default of `listVerifyMs`. */
const LIST_VERIFY_MS = 5000;
/** The miss probeForRefill answers for another tenant's session: Redis refuses its refill. */
const FOREIGN_MISS: RefillEpoch = { epoch: '' };

interface Pending {
  scope: StoreScope;
  sid: string;
  key: string;
  /**
   * A deletion missed Redis: the repair leaves its tombstones as well as dropping the copies, or
   * the Redis half of a write that passed MySQL before the deletion, landing after the repair,
   * would cache what MySQL no longer holds.
   */
  deleted?: boolean;
  /**
   * The records (markWriting tokens) of writes whose Redis half missed: the repair ends them with
   * the copy it drops, so refills cache the key again then rather than at their deadlines.
   */
  tokens?: string[];
}

/**
 * LRU → Redis → MySQL. Writes commit to the durable store first, then update Redis; reads fill
 * every tier above the one that answered, so an expiry, FLUSHALL or restart of Redis loses
 * nothing. While Redis fails, a breaker sends every call to MySQL at once.
 */
export class TieredSessionStore implements SessionStore {
  readonly kind = 'tiered';
  readonly guard: HotTierGuard;
  /**
   * This process's copies of values read lately (their JSON text: a hit is parsed anew, so no
   * caller shares or changes the copy), each trusted for lruTtlMs. lru-cache drops a stale entry
   * only when it is read or pushed out by newer ones: after a burst over many sessions an idle
   * process would keep up to lruMax values (a task's answers, a shared value) for good, none of
   * which it may serve. `sweep` drops them.
   */
  private readonly lru: LRUCache<string, { json: string }>;
  private readonly sweep?: NodeJS.Timeout;
  private readonly pending = new Map<string, Pending>();
  /** List refills under way in this process (lruKey → the refill). */
  private readonly listFills = new Map<string, Promise<unknown>>();
  /** Set when more writes missed Redis than `pending` holds: the SCAN cursor of the purge. */
  private purgeCursor: string | null = null;
  /** Bumped whenever the purge starts (over): a step of an earlier run does not move the cursor. */
  private purgeRun = 0;
  private repairing?: Promise<void>;
  /** The next try of a repair that could not finish (see scheduleRepair). */
  private repairTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    readonly durable: SessionStore,
    readonly hot: RedisSessionStore,
    private readonly opts: TieredOptions,
  ) {
    this.guard = new HotTierGuard(opts.guard ?? DEFAULT_GUARD);
    const lruTtlMs = opts.lruTtlMs ?? 1000;
    this.lru = new LRUCache({ max: opts.lruMax ?? 10_000, ttl: lruTtlMs });
    if (lruTtlMs > 0) {
      this.sweep = setInterval(() => this.lru.purgeStale(), Math.max(lruTtlMs, LRU_SWEEP_MIN_MS));
      this.sweep.unref();
    }
  }

  async save(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<void> {
    // One copy, taken now, goes to every tier: the caller may change its object (a task's
    // executions while a wave runs) before the Redis write, which must not get a version MySQL
    // never had. Its JSON text, made once for every tier: what the LRU answers (parsed from it)
    // is what MySQL and Redis would.
    const encoded = new EncodedValue(toJson(value));
    const { token } = await this.durably(scope, sid, key, () =>
      this.durable.save(scope, sid, key, encoded, opts),
    );
    const lruKey = this.lruKey(scope, sid, key);
    this.remember(key, lruKey, () => encoded.json);
    await this.hotSave(scope, sid, key, encoded, opts, lruKey, token);
  }

  /**
   * The hot write of a save or create, after MySQL's. While the key's deletion tombstone lasts
   * (deleteKeys) Redis refuses it and drops its copy: the write may have passed MySQL just before
   * the deletion (an execution's write as its task closed), and would bring the deleted key back
   * for its TTL. Nor is it kept in the LRU then. A later write of the key is not lost for that:
   * reads find it in MySQL, and Redis caches the key again once the tombstone (1 min) is gone.
   * Redis refuses it too once the write's token is past its deadline, or never reached Redis
   * (SAVE_CACHED): the key may have been deleted meanwhile and its tombstone lapsed.
   */
  private async hotSave(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    opts: WriteOptions,
    lruKey: string,
    token: string,
  ): Promise<void> {
    await this.hotWrite(
      scope,
      sid,
      key,
      async () => {
        const written = await this.hot.saveIfNotDeleted(
          scope,
          sid,
          key,
          value,
          { userId: opts.userId, ttlSeconds: this.opts.ttlFor(key).ttlSeconds },
          token,
        );
        if (!written) this.lru.delete(lruKey);
      },
      false,
      token,
    );
  }

  async create(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<boolean> {
    const { result: created, token } = await this.durably(scope, sid, key, () =>
      this.durable.create(scope, sid, key, value, opts),
    );
    if (created)
      await this.hotSave(scope, sid, key, value, opts, this.lruKey(scope, sid, key), token);
    else await this.endWriting(sid, key, token);
    return created;
  }

  /**
   * `consistent`: the durable value, for a read that decides something (a read-modify-write
   * under the conversation lock, whether work was already done). Redis is a cache that can lag
   * MySQL: another process's Redis write may have failed or landed late, or a failover may have
   * brought back an older copy. Such a read fills no tier (it may not hold the lock that orders
   * the writes of this key, and a late refill would put an older value back); it asks Redis
   * alongside, and drops a cached copy that disagrees, so the next plain read refills it.
   *
   * `owned`: whether a value is the caller's. One that is not is answered null, as a missing one,
   * and costs what a missing one does: a copy or an absent marker in the LRU or Redis is a miss
   * of that tier, and the read goes on to MySQL, so how soon the answer comes does not tell
   * whether the id exists. The caller's own reads ask no more tiers than without it.
   */
  async get<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    consistent = false,
    owned?: (value: T) => boolean,
  ): Promise<T | null> {
    assertId(sid, 'session id');
    assertStateKey(key);
    const lruKey = this.lruKey(scope, sid, key);
    // MySQL is read whoever asks: the same cost for an id that is the caller's, another's or none.
    if (consistent) {
      const [value, hot] = await Promise.all([
        this.durable.get<T>(scope, sid, key),
        this.hotRead(() => this.hot.probe<T>(scope, sid, key, 0)),
      ]);
      if (hot.ok && hot.value !== null && !sameValue(hot.value, value)) {
        this.lru.delete(lruKey);
        await this.hotWrite(scope, sid, key, () => this.hot.deleteKey(scope, sid, key));
      }
      return owned && value !== null && !owned(value) ? null : value;
    }
    const rule = this.opts.ttlFor(key);
    const local = rule.lru === false ? undefined : this.lru.get(lruKey);
    if (local) {
      const value = JSON.parse(local.json) as T;
      if (!owned || owned(value)) return value;
    }
    const hot = await this.hotRead(() =>
      this.hot.probeForRefill<T>(scope, sid, key, rule.sliding ? rule.ttlSeconds : 0),
    );
    let refill = hot.ok && isRefill(hot.value) ? hot.value : null;
    if (hot.ok && !refill) {
      const found = hot.value as { value: T } | typeof ABSENT;
      // An absent marker is not known to be the caller's either: a conversation's `task-ref`,
      // marked once someone asked for it as a task, would answer another user sooner than a
      // missing id does, telling them the conversation exists.
      if (!owned || (found !== ABSENT && owned(found.value))) {
        if (found === ABSENT) return null;
        this.remember(key, lruKey, () => JSON.stringify(found.value));
        return found.value;
      }
      // On to MySQL as a miss goes, with the refill a foreign session's miss has (Redis refuses
      // it), so the read ends with the one Redis call a miss ends with.
      refill = FOREIGN_MISS;
    }
    const value = await this.durable.get<T>(scope, sid, key);
    if (value !== null) {
      // Only where Redis still holds nothing, the session was not deleted and Redis did not
      // restart meanwhile (`refill`): a writer may have replaced the value since it was read
      // (MySQL, then Redis), and its copy is the newer one. A refused refill is not kept in the
      // LRU either.
      let filled = true;
      if (refill)
        await this.hotWrite(scope, sid, key, async () => {
          filled = await this.hot.fill(scope, sid, key, value, rule.ttlSeconds, refill);
        });
      if (filled) this.remember(key, lruKey, () => JSON.stringify(value));
    } else if (refill) {
      // Keys read before they are ever written (a summary not folded yet) stop costing a MySQL
      // read each time. Best effort: a marker that could not be set changes nothing.
      await this.guard.attempt(() =>
        this.hot.markAbsent(scope, sid, key, Math.min(rule.ttlSeconds, ABSENT_TTL_SECONDS), refill),
      );
    }
    return owned && value !== null && !owned(value) ? null : value;
  }

  /**
   * Consistent reads (see `get`) of several single values of one session: from MySQL in one
   * statement when it can (all as they stood at one moment), Redis asked alongside.
   */
  async getConsistent<T>(scope: StoreScope, sid: string, keys: string[]): Promise<Array<T | null>> {
    assertId(sid, 'session id');
    keys.forEach((k) => assertStateKey(k));
    const durable = this.durable as SessionStore & {
      getMany?: (s: StoreScope, id: string, k: string[]) => Promise<Array<T | null>>;
    };
    const [values, hots] = await Promise.all([
      durable.getMany
        ? durable.getMany(scope, sid, keys)
        : Promise.all(keys.map((k) => this.durable.get<T>(scope, sid, k))),
      Promise.all(keys.map((k) => this.hotRead(() => this.hot.probe<T>(scope, sid, k, 0)))),
    ]);
    await Promise.all(
      keys.map(async (key, i) => {
        const hot = hots[i];
        if (!hot.ok || hot.value === null || sameValue(hot.value, values[i])) return;
        this.lru.delete(this.lruKey(scope, sid, key));
        await this.hotWrite(scope, sid, key, () => this.hot.deleteKey(scope, sid, key));
      }),
    );
    return values;
  }

  async append(
    scope: StoreScope,
    sid: string,
    key: string,
    item: unknown,
    opts: AppendOptions = {},
  ): Promise<number> {
    const encoded = new EncodedValue(toJson(item));
    const { result: index, token } = await this.durably(scope, sid, key, () =>
      this.durable.append(scope, sid, key, encoded, opts),
    );
    const ttlSeconds = this.opts.ttlFor(key).ttlSeconds;
    await this.hotWrite(
      scope,
      sid,
      key,
      () =>
        this.hot
          .appendCached(scope, sid, key, encoded, { index, ttlSeconds, writeToken: token })
          .catch((err) => {
            if (!LoomError.is(err, LoomErrorCode.CONFLICT)) throw err; // already cached by a refill
          }),
      false,
      token,
    );
    return index;
  }

  async getList<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    range: ListRange = {},
  ): Promise<ListItem<T>[]> {
    assertId(sid, 'session id');
    assertStateKey(key);
    assertRange(range); // a bad range is the caller's error, never a Redis failure
    const rule = this.opts.ttlFor(key);
    const hot = await this.hotRead(() =>
      this.hot.getListForRefill<T>(
        scope,
        sid,
        key,
        range,
        rule.sliding ? rule.ttlSeconds : 0,
        this.opts.listVerifyMs ?? LIST_VERIFY_MS,
      ),
    );
    const answer = hot.ok ? hot.value : null;
    if (answer && isUnchecked(answer)) return this.checkedList(scope, sid, key, range, answer);
    if (answer && !isRefill(answer)) return answer;
    const epoch = answer && isRefill(answer) ? answer : null;
    // One refill of a list at a time in this process: the other readers that miss meanwhile
    // (a popular conversation gone cold) read MySQL alone.
    const fillId = this.lruKey(scope, sid, key);
    if (!epoch || this.listFills.has(fillId))
      return this.durable.getList<T>(scope, sid, key, range);
    const whole =
      range.afterIndex === undefined && range.last === undefined && range.limit === undefined;
    const refill = this.refillList<T>(scope, sid, key, rule.ttlSeconds, whole, epoch);
    this.listFills.set(fillId, refill);
    try {
      if (whole) return await refill;
      // A range (the newest 50 of a long log) is one bounded MySQL read; the refill pages beside it.
      // The refill only warms the cache: a page it could not read leaves a miss (a later read
      // refills), never fails a read that has its answer.
      const [items] = await Promise.all([
        this.durable.getList<T>(scope, sid, key, range),
        refill.catch(() => undefined),
      ]);
      return items;
    } finally {
      if (this.listFills.get(fillId) === refill) this.listFills.delete(fillId);
    }
  }

  /**
   * Copies a durable list into Redis a page at a time (FILL_PAGE_ITEMS rows per MySQL read, at
   * most about 1 MB per Redis call); only the last page marks it complete, so a refill cut off
   * midway leaves a miss. Returns every item when `keep` (a read of the whole list), else none.
   */
  private async refillList<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    ttlSeconds: number,
    keep: boolean,
    epoch: RefillEpoch,
  ): Promise<ListItem<T>[]> {
    const kept: ListItem<T>[] = [];
    let filling = true;
    for (let after = 0; ;) {
      const page = await this.durable.getList<T>(scope, sid, key, {
        afterIndex: after,
        limit: FILL_PAGE_ITEMS,
      });
      if (keep) kept.push(...page);
      const last = page.length < FILL_PAGE_ITEMS;
      // An empty list is cached only in a session that exists (a refill never claims an id).
      if (after === 0 && page.length === 0 && !(await this.durable.exists(scope, sid)))
        filling = false;
      if (filling) {
        let filled = false;
        await this.hotWrite(scope, sid, key, async () => {
          filled = await this.hot.fillList(scope, sid, key, page, ttlSeconds, last, epoch);
        });
        filling = filled;
      }
      if (last || (!filling && !keep)) return kept;
      after = page[page.length - 1].index;
    }
  }

  /**
   * A list cached whole, last checked against MySQL more than listVerifyMs ago: MySQL's last index
   * (one indexed MAX) decides. The same: Redis held every item MySQL did when it was read, so it
   * is served, and stamped checked as of that read (sent, not awaited: a stamp lost costs one more
   * check). Not the same: a write of the list missed Redis and left no record there (its writer
   * could not reach Redis at all, and may never repair: killed meanwhile), or one's Redis half is
   * on its way: the copy goes, MySQL answers, and the next read refills. MySQL out of reach:
   * the copy is served unchecked (and not stamped), as before there was a check, so an outage
   * does not turn every read of a hot list into a 503 once its check is due; no write of the
   * list commits meanwhile, so only one cut off before the outage can be missing from it.
   */
  private async checkedList<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    range: ListRange,
    unchecked: UncheckedList<T>,
  ): Promise<ListItem<T>[]> {
    let last: number;
    try {
      last = await this.durable.listLength(scope, sid, key);
    } catch (err) {
      if (LoomError.is(err, LoomErrorCode.UNAVAILABLE)) return unchecked.items;
      throw err;
    }
    if (last === unchecked.check.last) {
      this.hot
        .markListChecked(scope, sid, key, unchecked.check.at)
        .catch((err: unknown) => this.opts.onHotError?.(err));
      return unchecked.items;
    }
    await this.hotWrite(scope, sid, key, () => this.hot.purge(sid, key));
    return this.durable.getList<T>(scope, sid, key, range);
  }

  /** `consistent`: the durable count, as for `get` (a killed writer may have left Redis short). */
  async listLength(
    scope: StoreScope,
    sid: string,
    key: string,
    consistent = false,
  ): Promise<number> {
    assertId(sid, 'session id');
    assertStateKey(key);
    if (consistent) return this.durable.listLength(scope, sid, key);
    const hot = await this.hotRead(() =>
      this.hot.listLengthIfComplete(scope, sid, key, this.opts.listVerifyMs ?? LIST_VERIFY_MS),
    );
    if (hot.ok && hot.value >= 0) return hot.value;
    return this.durable.listLength(scope, sid, key);
  }

  exists(scope: StoreScope, sid: string): Promise<boolean> {
    return this.durable.exists(scope, sid);
  }

  listSessionKeys(scope: StoreScope, sid: string): Promise<string[]> {
    return this.durable.listSessionKeys(scope, sid);
  }

  async deleteKey(scope: StoreScope, sid: string, key: string): Promise<void> {
    await this.deleteKeys(scope, sid, [key]);
  }

  /**
   * Removes several state keys of one session: one statement in MySQL when it can. True when
   * Redis's copies went too; false when they could not (Redis failing): this process drops them
   * once Redis answers again, unless it stops first, so a caller that must know they are gone
   * keeps a durable reminder until a later call answers true.
   */
  async deleteKeys(scope: StoreScope, sid: string, keys: string[]): Promise<boolean> {
    assertId(sid, 'session id');
    keys.forEach((k) => assertStateKey(k));
    const durable = this.durable as SessionStore & {
      deleteKeys?: (s: StoreScope, id: string, k: string[]) => Promise<void>;
    };
    if (keys.length === 0) return true;
    // MySQL's rows first, then Redis's copies: a process killed in between leaves the copies
    // cached, and its caller keeps a durable reminder until a call answers true (a task's agent
    // sessions: its run-index entry, which recovery tidies). Unlike a session's deletion (below),
    // the copies are dropped only after, which spares every turn a round trip.
    if (durable.deleteKeys) await durable.deleteKeys(scope, sid, keys);
    else for (const key of keys) await this.durable.deleteKey(scope, sid, key);
    for (const key of keys) this.lru.delete(this.lruKey(scope, sid, key));
    // Tombstones first, as for a session's deletion: a read that read MySQL before the delete and
    // refills after it is refused, rather than bringing the key back for its TTL.
    const tombstoned = await this.hotWrite(
      scope,
      sid,
      keys,
      () =>
        this.hot.markKeysDeleted(
          scope,
          sid,
          keys,
          this.opts.deleteTombstoneMs ?? DELETE_TOMBSTONE_MS,
        ),
      true,
    );
    const deleted = await Promise.all(
      keys.map((key) =>
        this.hotWrite(scope, sid, key, () => this.hot.deleteKey(scope, sid, key), true),
      ),
    );
    return tombstoned && deleted.every(Boolean);
  }

  /**
   * Redis's copies go before MySQL's rows as well as after them: a process killed in between
   * leaves nothing cached of a session MySQL no longer holds (a DELETE that did not answer 204
   * is retried, but a client that gave up would otherwise see the conversation for its hot TTL).
   */
  async delete(scope: StoreScope, sid: string): Promise<void> {
    await this.dropHotSession(scope, sid);
    await this.durable.delete(scope, sid);
    await this.dropHotSession(scope, sid);
  }

  private async dropHotSession(scope: StoreScope, sid: string): Promise<void> {
    for (const k of this.lru.keys())
      if (k.startsWith(this.lruKey(scope, sid, ''))) this.lru.delete(k);
    // The tombstone first: a read that read MySQL before the delete and refills after it (even
    // after the keys below are gone) is refused, rather than bringing the session back.
    await this.hotWrite(
      scope,
      sid,
      '*',
      async () => {
        await this.hot.markDeleted(scope, sid, this.opts.deleteTombstoneMs ?? DELETE_TOMBSTONE_MS);
        await this.hot.delete(scope, sid);
      },
      true,
    );
  }

  listSessions(
    scope: StoreScope,
    key: string,
    page: { limit: number; before?: { updatedAt: Date; sessionId: string }; userId?: string },
  ): Promise<SessionSummary[]> {
    return this.durable.listSessions(scope, key, page);
  }

  nextFence(scope: StoreScope, sid: string): Promise<number> {
    return this.durable.nextFence(scope, sid);
  }

  /**
   * Drops every cached copy of a session (this process's LRU and Redis) so the next reads come
   * from the durable store: a process killed between its MySQL commit and its Redis write leaves
   * a hot copy that lacks the write, which recovery must not trust.
   */
  async invalidate(sid: string): Promise<void> {
    assertId(sid, 'session id');
    const marker = `\u0000${sid}\u0000`;
    for (const k of this.lru.keys()) if (k.includes(marker)) this.lru.delete(k);
    await this.hotWrite({ tenantId: '*' }, sid, '*', () => this.hot.purge(sid));
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweep);
    clearTimeout(this.repairTimer);
    await Promise.all([this.durable.close(), this.hot.close()]);
  }

  /**
   * A durable write of `key`, recorded in Redis as under way (markWriting) from before it starts
   * until its Redis half ends the record. Should this process stop in between (killed after the
   * MySQL commit), readers drop what Redis holds of the key once the record's deadline passes,
   * rather than serve a copy that lacks the write; meanwhile no refill caches the key.
   *
   * The record is sent, not awaited: it goes out on the connection the Redis half takes later, so
   * Redis runs it first, and it adds no round trip. Nor does it count for the breaker: a burst of
   * writes under a busy event loop would time records out and open it, sending every hot write
   * of that burst to nowhere. One Redis refused costs at most a needless drop of the key's copy.
   *
   * While the breaker is open the record is sent all the same (Redis may well answer: the breaker
   * opens on time-outs of a busy event loop too), and it drops the key's cached copy at once: the
   * write's Redis half will most likely not be sent, and other processes that reach Redis would
   * otherwise go on serving a copy without this write (a list cached whole, short of the messages
   * this process acknowledged) until this process's repair, which only it knows to run. The record
   * keeps refills out until its deadline, as for a writer that stopped.
   *
   * A write that failed definitely (a LoomError other than UNAVAILABLE) wrote nothing: its record
   * just ends. One that failed without saying whether it committed drops the cached copy and
   * keeps the key uncached for `unknownWriteHoldMs`, as the statement may still commit (if Redis
   * cannot be told, the key is dropped once it answers again, as for a missed hot write).
   */
  private async durably<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    write: () => Promise<T>,
  ): Promise<{ result: T; token: string }> {
    // A bad id or key is the caller's error, thrown before anything reaches Redis.
    assertId(sid, 'session id');
    assertStateKey(key);
    const keepMs = this.opts.ttlFor(key).ttlSeconds * 1000;
    const token = randomBytes(9).toString('base64url');
    const deadlineMs = this.opts.writeDeadlineMs ?? WRITE_DEADLINE_MS;
    const drop = this.guard.isOpen;
    if (drop) this.lru.delete(this.lruKey(scope, sid, key));
    this.hot
      .markWriting(scope, sid, key, token, deadlineMs, keepMs, drop)
      .catch((err: unknown) => this.opts.onHotError?.(err));
    try {
      return { result: await write(), token };
    } catch (err) {
      if (LoomError.is(err) && err.code !== LoomErrorCode.UNAVAILABLE) {
        await this.endWriting(sid, key, token);
      } else {
        const holdMs = this.opts.unknownWriteHoldMs ?? UNKNOWN_WRITE_HOLD_MS;
        this.lru.delete(this.lruKey(scope, sid, key));
        await this.hotWrite(scope, sid, key, () =>
          this.hot.markWriting(scope, sid, key, token, holdMs, keepMs, true),
        );
      }
      throw err;
    }
  }

  /** Ends the record of a durable write that wrote nothing; one Redis did not take lapses by itself. */
  private async endWriting(sid: string, key: string, token: string): Promise<void> {
    const res = await this.guard.attempt(() => this.hot.endWriting(sid, key, token));
    if (!res.ok) this.opts.onHotError?.(res.error);
  }

  /**
   * Keeps the value's JSON text (`json`, made only when it is kept; a save's is made already):
   * what a save stores, not parsed again here, nor deep-copied on every hit.
   */
  private remember(key: string, lruKey: string, json: () => string): void {
    // lru-cache reads a ttl of 0 as "never stale": no LRU is meant.
    if (this.opts.lruTtlMs === 0) return;
    if (this.opts.ttlFor(key).lru !== false) this.lru.set(lruKey, { json: json() });
  }

  private lruKey(scope: StoreScope, sid: string, key: string): string {
    return `${scope.tenantId}\u0000${sid}\u0000${key}`;
  }

  private async hotRead<T>(fn: () => Promise<T>): Promise<{ ok: true; value: T } | { ok: false }> {
    // A hot copy that missed writes must be dropped before anyone reads it again: until the
    // repair (in the background, never waited for) is done, reads go to MySQL.
    if (this.needsRepair()) {
      this.repair();
      return { ok: false };
    }
    const res = await this.guard.attempt(fn);
    if (!res.ok) this.opts.onHotError?.(res.error);
    return res.ok ? res : { ok: false };
  }

  /**
   * A hot write that fails leaves a possibly stale copy: remember it and drop it once Redis
   * answers, ending the record of the durable write it followed (`token`) then.
   */
  private async hotWrite(
    scope: StoreScope,
    sid: string,
    key: string | string[],
    fn: () => Promise<unknown>,
    deleted = false,
    token = '',
  ): Promise<boolean> {
    const res = await this.guard.attempt(fn);
    if (res.ok) {
      this.repair();
      return true;
    }
    this.opts.onHotError?.(res.error);
    if (this.pending.size < (this.opts.maxPendingInvalidations ?? 10_000)) {
      for (const k of typeof key === 'string' ? [key] : key) {
        const id = `${scope.tenantId}\u0000${sid}\u0000${k}`;
        // A deletion stays one (its tombstones are due) whatever write of the key missed after it.
        const was = this.pending.get(id);
        const tokens = [...(was?.tokens ?? []), ...(token ? [token] : [])];
        this.pending.set(id, {
          scope,
          sid,
          key: k,
          deleted: deleted || was?.deleted === true,
          ...(tokens.length > 0 ? { tokens } : {}),
        });
      }
    } else {
      // Too many to list: every cached session goes, from the start of the keyspace (a purge
      // under way starts over, as it may have passed this session already).
      this.purgeRun++;
      this.purgeCursor = '0';
      this.pending.clear();
    }
    this.scheduleRepair();
    return false;
  }

  private needsRepair(): boolean {
    return this.pending.size > 0 || this.purgeCursor !== null;
  }

  /** Resolves when the repair of missed hot writes started so far has ended (or stopped on a failure). */
  async repaired(): Promise<void> {
    await this.repairing;
  }

  /**
   * Drops the hot copies of `keys` of a session (Redis and this process's LRU) as for a missed hot
   * write, so the next reads refill them from MySQL; what Redis does not take now stays listed
   * (see dropMissedHotCopies). For an operator tool that writes behind the apps' backs (the legacy
   * importer): a copy an earlier run left stale, Redis away, is dropped by the next run.
   */
  async dropHotCopies(scope: StoreScope, sid: string, keys: string[]): Promise<void> {
    assertId(sid, 'session id');
    for (const key of keys) assertStateKey(key);
    for (const key of keys) this.lru.delete(this.lruKey(scope, sid, key));
    await this.hotWrite(scope, sid, keys, () =>
      Promise.all(keys.map((key) => this.hot.purge(sid, key))),
    );
  }

  /**
   * Drops at once, and waits for it, the hot copies that missed writes (the repair that otherwise
   * runs in the background when Redis answers again). Returns the sessions whose copies are still
   * to drop (`*`: the whole cache), none when done. A process about to exit (an operator tool)
   * asks this: what it still lists is lost with it, and Redis keeps serving those copies.
   */
  async dropMissedHotCopies(): Promise<string[]> {
    await this.repairing;
    this.repair();
    await this.repairing;
    if (this.purgeCursor !== null) return ['*'];
    return [...new Set([...this.pending.values()].map((entry) => entry.sid))];
  }

  /** Starts, once at a time, dropping the hot copies that missed writes; nobody waits for it. */
  private repair(): void {
    if (this.repairing || !this.needsRepair()) return;
    this.repairing = this.dropMissed().finally(() => {
      this.repairing = undefined;
      this.scheduleRepair();
    });
  }

  /**
   * Tries the repair again in `repairRetryMs` while copies are still to drop. Only this process
   * knows of them, and other processes reaching Redis serve them meanwhile (a list without a
   * write it acknowledged): it must not wait for a call of its own that may never come (an agent
   * whose execution was over, an idle replica).
   */
  private scheduleRepair(): void {
    if (this.closed || this.repairTimer || !this.needsRepair()) return;
    this.repairTimer = setTimeout(() => {
      this.repairTimer = undefined;
      this.repair();
    }, this.opts.repairRetryMs ?? REPAIR_RETRY_MS);
    this.repairTimer.unref();
  }

  /** The whole-cache purge, one bounded SCAN step per call, then the listed keys; stops on a failure. */
  private async dropMissed(): Promise<void> {
    while (this.purgeCursor !== null) {
      const [run, cursor] = [this.purgeRun, this.purgeCursor];
      const res = await this.guard.attempt(() => this.hot.purgeStep(cursor));
      if (!res.ok) return;
      if (run === this.purgeRun) this.purgeCursor = res.value === '0' ? null : res.value;
    }
    const tombstoneMs = this.opts.deleteTombstoneMs ?? DELETE_TOMBSTONE_MS;
    for (const [id, entry] of [...this.pending]) {
      const { scope, sid, key, deleted, tokens } = entry;
      const res = await this.guard.attempt(async () => {
        if (deleted && key === '*') await this.hot.markDeleted(scope, sid, tombstoneMs);
        else if (deleted) await this.hot.markKeysDeleted(scope, sid, [key], tombstoneMs);
        await this.hot.purge(sid, key === '*' ? undefined : key);
        // After the copy went: a refill that read MySQL before those writes and lands between
        // the two finds their records and is refused; one that lands after finds the refill
        // epoch its read's miss returned ended by the purge, and is refused too.
        if (tokens) await this.hot.endWriting(sid, key, ...tokens);
      });
      if (!res.ok) return;
      // The same key may have missed another write meanwhile: that one stays listed.
      if (this.pending.get(id) === entry) this.pending.delete(id);
    }
  }
}

/** A hot read's miss, with the epoch its refill brings back (see RedisSessionStore.probeForRefill). */
function isRefill(answer: unknown): answer is RefillEpoch {
  return typeof answer === 'object' && answer !== null && 'epoch' in answer;
}

/** A hot list read's answer that is due for its check against MySQL (see checkedList). */
function isUnchecked<T>(
  answer: ListItem<T>[] | RefillEpoch | UncheckedList<T>,
): answer is UncheckedList<T> {
  return !Array.isArray(answer) && 'check' in answer;
}

/** Whether Redis's answer (a value or the absent marker) is what MySQL holds. */
function sameValue(hot: { value: unknown } | typeof ABSENT, durable: unknown): boolean {
  if (hot === ABSENT) return durable === null;
  return durable !== null && JSON.stringify(hot.value) === JSON.stringify(durable);
}
