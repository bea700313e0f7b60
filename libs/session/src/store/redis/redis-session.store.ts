import { isCluster, RedisClient, slotMasters } from '../../redis/redis-client';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { assertId, assertPrincipal, assertStateKey, isValidId } from '../../ids';
import { decodeValue, encodeValue } from '../codec';
import * as rules from '../memory/store-rules';
import {
  AppendOptions,
  ListItem,
  ListRange,
  SessionStore,
  SessionSummary,
  StoreScope,
  WriteOptions,
} from '../session-store';
import { randomBytes } from 'crypto';
import { RedisKeys } from './redis-keys';
import * as scripts from './redis-scripts';

/** The most member text one list-refill call carries (a page of long messages is split further). */
const FILL_CALL_CHARS = 1_000_000;

/**
 * A read that may refill, when Redis holds no refill epoch for its session, makes this one
 * (see EPOCH_MS in redis-scripts): new to every Redis this process ever reached, without a
 * random draw per read.
 */
const epochs = { stem: randomBytes(9).toString('base64url'), n: 0 };
const newEpoch = () => `${epochs.stem}.${++epochs.n}`;

/** A miss of a read that may refill: the epoch its refill brings back (see EPOCH_MS). */
export interface RefillEpoch {
  epoch: string;
  /** When the read missed (ms, Redis's clock): a list refill is stamped checked as of then. */
  at?: number;
}

/**
 * A cache's list, complete, last checked against the durable store longer ago than the read
 * asked (see LIST_CHECKED): `at` (ms, Redis's clock) when it was read, `last` its last index.
 */
export interface UncheckedList<T> {
  items: ListItem<T>[];
  check: { at: number; last: number };
}

/** What a cache keeps for a key the durable store does not hold: not JSON, so never a value. */
const ABSENT_MARKER = '\u0000absent';
export const ABSENT = Symbol('absent');

type Script = (keys: string[], args: Array<string | number>) => Promise<unknown>;

/**
 * The Redis backend. Standalone, lists are authoritative; as the hot tier of the tiered store
 * (`authoritative: false`) a list is trusted only when a full refill marked it complete.
 * Every read and write is one Lua script that checks the session's owner.
 */
export class RedisSessionStore implements SessionStore {
  readonly kind = 'redis';
  readonly keys: RedisKeys;
  private readonly run: Record<keyof typeof scripts, Script>;

  constructor(
    private readonly redis: RedisClient,
    prefix: string,
    private readonly opts: { authoritative?: boolean; ownsConnection?: boolean } = {},
  ) {
    this.keys = new RedisKeys(prefix);
    const run = {} as Record<keyof typeof scripts, Script>;
    for (const [name, lua] of Object.entries(scripts)) {
      const command = `loom${name}`;
      if (!(command in redis)) redis.defineCommand(command, { lua });
      run[name as keyof typeof scripts] = (keys, args) =>
        (redis as any)[command](keys.length, ...keys, ...args) as Promise<unknown>;
    }
    this.run = run;
  }

  /**
   * As a cache (`authoritative: false`), a save is refused while the tombstone of the key's
   * deletion lasts (see SAVE_CACHED), and drops the cached value instead (see saveIfNotDeleted).
   */
  async save(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<void> {
    await this.saveIfNotDeleted(scope, sid, key, value, opts);
  }

  /**
   * save; false when a cache refused it for the key's deletion tombstone. `writeToken`: the
   * cache's record of the durable write this follows (markWriting), which it ends.
   */
  async saveIfNotDeleted(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
    writeToken = '',
  ): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    rules.assertWriteOptions(opts);
    const args = [...this.writeArgs(scope, key, encodeValue(value), opts), '', ''];
    if (this.cacheMode && !opts.execution) {
      const keys = [
        ...this.writeKeys(sid, this.keys.value(sid, key)),
        this.keys.keyGone(sid, key),
        this.keys.writing(sid, key),
        this.keys.gone(sid),
      ];
      args.push(writeToken);
      const res = await this.run.SAVE_CACHED(keys, args);
      fail(res);
      return res === 0;
    }
    const res = await this.run.SAVE(this.guardedKeys(sid, this.keys.value(sid, key), opts), [
      ...args,
      ...this.guardArgs(opts),
    ]);
    fail(res);
    await this.touchIndex(scope, sid, key, opts.userId);
    return true;
  }

  /**
   * A cache refill (the tiered store's read of a key Redis missed): writes `value` only where
   * Redis holds nothing for the key, so a write that landed since the durable read stays.
   * `refill`: what the read's miss answered (probeForRefill); Redis refuses the refill once it
   * holds another epoch (it restarted since).
   */
  async fill(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    ttlSeconds: number,
    refill?: RefillEpoch,
  ): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    const res = await this.run.FILL(
      [
        ...this.writeKeys(sid, this.keys.value(sid, key)),
        ...this.refillGuards(sid, key),
        ...(refill ? [this.keys.epoch(sid)] : []),
      ],
      [
        ...this.writeArgs(scope, key, encodeValue(value), { ttlSeconds }),
        ...(refill ? [refill.epoch] : []),
      ],
    );
    fail(res);
    return res === 1;
  }

  async create(
    scope: StoreScope,
    sid: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    rules.assertWriteOptions(opts);
    const res = await this.run.CREATE(this.guardedKeys(sid, this.keys.value(sid, key), opts), [
      ...this.writeArgs(scope, key, encodeValue(value), opts),
      '',
      '',
      ...this.guardArgs(opts),
    ]);
    fail(res);
    if (res === 1) await this.touchIndex(scope, sid, key, opts.userId);
    return res === 1;
  }

  async get<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    slideTtlSeconds = 0,
  ): Promise<T | null> {
    const found = await this.probe<T>(scope, sid, key, slideTtlSeconds);
    return found === null || found === ABSENT ? null : found.value;
  }

  /**
   * A key's value; ABSENT when a cache marked it absent from the durable store (markAbsent);
   * null when this store knows nothing of it.
   */
  async probe<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    slideTtlSeconds = 0,
  ): Promise<{ value: T } | typeof ABSENT | null> {
    const raw = (await this.valueRead(scope, sid, key, slideTtlSeconds, false)) as string | null;
    return raw === null ? null : found<T>(raw);
  }

  /**
   * probe of a cache, for a read that refills what it misses: a miss answers the session's
   * refill epoch, which the refill (`fill`, `markAbsent`) brings back (see EPOCH_MS).
   */
  async probeForRefill<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    slideTtlSeconds = 0,
  ): Promise<{ value: T } | typeof ABSENT | RefillEpoch> {
    const raw = await this.valueRead(scope, sid, key, slideTtlSeconds, true);
    if (Array.isArray(raw)) return { epoch: String(raw[0]) };
    // A foreign session: nothing to refill from here (the refill would be refused).
    return raw === null ? { epoch: '' } : found<T>(raw as string);
  }

  /** GET; `forRefill`: a miss answers the refill epoch (probeForRefill). */
  private async valueRead(
    scope: StoreScope,
    sid: string,
    key: string,
    slideTtlSeconds: number,
    forRefill: boolean,
  ): Promise<unknown> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    const keys = this.readKeys(sid, key, this.keys.value(sid, key));
    const args: Array<string | number> = [scope.tenantId, slideTtlSeconds * 1000];
    if (forRefill) {
      this.assertCache();
      keys.push(this.keys.epoch(sid));
      args.push(newEpoch());
    }
    return this.run.GET(keys, args);
  }

  /**
   * Records that the durable store holds no `key` (see MARK_ABSENT); false when not recorded.
   * `refill`: what the read's miss answered (probeForRefill), as for `fill`.
   */
  async markAbsent(
    scope: StoreScope,
    sid: string,
    key: string,
    ttlSeconds: number,
    refill?: RefillEpoch,
  ): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    const keys = [
      ...this.writeKeys(sid, this.keys.value(sid, key)),
      this.keys.keyGone(sid, key),
      this.keys.writing(sid, key),
      this.keys.gone(sid),
      ...(refill ? [this.keys.epoch(sid)] : []),
    ];
    const res = await this.run.MARK_ABSENT(keys, [
      scope.tenantId,
      ABSENT_MARKER,
      Math.max(1, Math.floor(ttlSeconds * 1000)),
      key,
      ...(refill ? [refill.epoch] : []),
    ]);
    return res === 1;
  }

  async append(
    scope: StoreScope,
    sid: string,
    key: string,
    item: unknown,
    opts: AppendOptions = {},
  ): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    rules.assertWriteOptions(opts);
    const args = [
      ...this.writeArgs(scope, key, encodeValue(item), opts),
      opts.index ?? '',
      this.cacheMode ? '0' : '1',
      ...this.guardArgs(opts),
    ];
    const res = await this.run.APPEND(this.guardedKeys(sid, this.keys.list(sid, key), opts), args);
    fail(res);
    return Number(res);
  }

  /**
   * A cache's append after the durable one, at the index it chose (CONFLICT when a refill cached
   * it already); it ends the cache's record of that write (`writeToken`, see markWriting).
   */
  async appendCached(
    scope: StoreScope,
    sid: string,
    key: string,
    item: unknown,
    opts: { index: number; ttlSeconds: number; writeToken: string },
  ): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    const keys = [
      ...this.writeKeys(sid, this.keys.list(sid, key)),
      this.keys.writing(sid, key),
      this.keys.gone(sid),
    ];
    const args = [
      ...this.writeArgs(scope, key, encodeValue(item), opts),
      opts.index,
      opts.writeToken,
    ];
    fail(await this.run.APPEND_CACHED(keys, args));
  }

  /**
   * A cache's record that a durable write of `key` is under way (see MARK_WRITING): until the
   * write's Redis half ends it, or for `deadlineMs`, refills of the key are refused; past the
   * deadline, readers drop what is cached of the key. `drop`: the cached copy goes at once.
   */
  async markWriting(
    scope: StoreScope,
    sid: string,
    key: string,
    writeToken: string,
    deadlineMs: number,
    keepMs: number,
    drop = false,
  ): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    // Nothing on a session cached as another tenant's: its writes are not this write's business.
    await this.run.MARK_WRITING(
      [
        this.keys.writing(sid, key),
        this.keys.value(sid, key),
        this.keys.list(sid, key),
        this.keys.meta(sid),
      ],
      [
        writeToken,
        Math.max(1, Math.floor(deadlineMs)),
        Math.floor(keepMs),
        drop ? '1' : '',
        scope.tenantId,
      ],
    );
  }

  /**
   * Ends a cache's records of durable writes (see markWriting): one that wrote nothing, or those
   * whose Redis half missed, once their copy is dropped.
   */
  async endWriting(sid: string, key: string, ...writeTokens: string[]): Promise<void> {
    this.check(sid, key);
    for (let i = 0; i < writeTokens.length; i += 1000)
      await this.redis.zrem(this.keys.writing(sid, key), ...writeTokens.slice(i, i + 1000));
  }

  async getList<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    range: ListRange = {},
  ): Promise<ListItem<T>[]> {
    assertPrincipal(scope.tenantId, 'tenant id');
    return (await this.getListIfComplete<T>(scope, sid, key, range)) ?? [];
  }

  /**
   * The range, or null when the list is not known whole here (a cache miss). A hit extends the
   * list's TTL to `slideTtlSeconds` when given (a sliding layer).
   */
  async getListIfComplete<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    range: ListRange = {},
    slideTtlSeconds = 0,
  ): Promise<ListItem<T>[] | null> {
    const res = await this.listRange(scope, sid, key, range, slideTtlSeconds, false);
    return Number(res[0]) === 1 ? this.listItems<T>(res.slice(1)) : null;
  }

  /** GET_LIST; `forRefill`: a miss answers the refill epoch (getListForRefill). */
  private async listRange(
    scope: StoreScope,
    sid: string,
    key: string,
    range: ListRange,
    slideTtlSeconds: number,
    forRefill: boolean,
    checkMs = 0,
  ): Promise<Array<string | number>> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    rules.assertRange(range);
    const keys = this.readKeys(sid, key, this.keys.list(sid, key));
    const args: Array<string | number> = [
      scope.tenantId,
      Math.max(range.afterIndex ?? 0, 0),
      range.last ?? -1,
      range.limit ?? -1,
      this.cacheMode ? '1' : '0',
      slideTtlSeconds * 1000,
    ];
    if (forRefill) {
      this.assertCache();
      keys.push(this.keys.epoch(sid));
      args.push(newEpoch(), checkMs, key);
    }
    return (await this.run.GET_LIST(keys, args)) as Array<string | number>;
  }

  private listItems<T>(members: Array<string | number>): ListItem<T>[] {
    return members.map((m) => {
      const member = String(m);
      const bar = member.indexOf('|');
      return { index: Number(member.slice(0, bar)), value: decodeValue<T>(member.slice(bar + 1)) };
    });
  }

  /**
   * getListIfComplete of a cache, for a read that refills what it misses: a miss answers the
   * session's refill epoch, which the refill (`fillList`) brings back (see EPOCH_MS). A list last
   * checked against the durable store more than `checkMs` ago (0: never asked) answers with what
   * its check needs (UncheckedList).
   */
  async getListForRefill<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    range: ListRange = {},
    slideTtlSeconds = 0,
    checkMs = 0,
  ): Promise<ListItem<T>[] | RefillEpoch | UncheckedList<T>> {
    const res = await this.listRange(scope, sid, key, range, slideTtlSeconds, true, checkMs);
    const complete = Number(res[0]);
    if (complete === 1) return this.listItems<T>(res.slice(1));
    if (complete === 2)
      return {
        items: this.listItems<T>(res.slice(3)),
        check: { at: Number(res[1]), last: Number(res[2]) },
      };
    // No epoch: a foreign session, nothing to refill from here (the refill would be refused).
    if (res.length < 2) return { epoch: '' };
    return { epoch: String(res[1]), ...(res.length > 2 ? { at: Number(res[2]) } : {}) };
  }

  /** Stamps a cache's list checked against the durable store as of `at` (see LIST_CHECKED). */
  async markListChecked(scope: StoreScope, sid: string, key: string, at: number): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    await this.run.LIST_CHECKED([this.keys.meta(sid)], [scope.tenantId, key, at]);
  }

  /**
   * Copies durable list items into the cached list, in calls of at most about 1 MB of members;
   * `complete` (the last page of a refill) then marks the list complete. False when refused (the
   * session was deleted meanwhile, or Redis restarted since the read's miss that answered
   * `refill`, see getListForRefill): the caller stops filling.
   */
  async fillList(
    scope: StoreScope,
    sid: string,
    key: string,
    items: ListItem[],
    ttlSeconds = 0,
    complete = true,
    refill?: RefillEpoch,
  ): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    const keys = [
      ...this.writeKeys(sid, this.keys.list(sid, key)),
      ...this.refillGuards(sid, key),
      ...(refill ? [this.keys.epoch(sid)] : []),
    ];
    const call = async (members: Array<string | number>, last: boolean): Promise<boolean> => {
      const head = [
        scope.tenantId,
        key,
        last ? '1' : '',
        ttlSeconds * 1000,
        refill?.epoch ?? '',
        refill?.at ?? '',
      ];
      const res = await this.run.FILL_LIST(keys, [...head, ...members]);
      fail(res);
      return res === 1;
    };
    let members: Array<string | number> = [];
    let chars = 0;
    for (const item of items) {
      const member = `${item.index}|${encodeValue(item.value)}`;
      if (members.length > 0 && chars + member.length > FILL_CALL_CHARS) {
        if (!(await call(members, false))) return false;
        [members, chars] = [[], 0];
      }
      members.push(item.index, member);
      chars += member.length;
    }
    return members.length > 0 || complete ? call(members, complete) : true;
  }

  /**
   * Leaves a tombstone of the session's deletion for `ttlMs`: until it expires, refills (`fill`,
   * `fillList`) of the session are refused, so a read that read the durable store before the
   * deletion cannot put what it read back; nor do a cache's saves and appends (SAVE_CACHED,
   * APPEND_CACHED), which may have passed the durable store before the deletion, and drop their
   * copy instead.
   */
  async markDeleted(scope: StoreScope, sid: string, ttlMs: number): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sid, 'session id');
    const px = Math.max(1, Math.floor(ttlMs));
    // Its value is its duration, which a save refused under it renews (SAVE_CACHED). None on a
    // session cached as another tenant's: a deletion of someone else's id leaves their cache be.
    await this.run.MARK_DELETED(
      [this.keys.meta(sid), this.keys.epoch(sid), this.keys.gone(sid)],
      [px, scope.tenantId],
    );
  }

  /**
   * Leaves a tombstone of each key's deletion for `ttlMs` (see markDeleted), so a read that read
   * one of them from the durable store before it was deleted cannot put it back in Redis.
   */
  async markKeysDeleted(
    scope: StoreScope,
    sid: string,
    keys: string[],
    ttlMs: number,
  ): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sid, 'session id');
    keys.forEach((k) => assertStateKey(k));
    if (keys.length === 0) return;
    const px = Math.max(1, Math.floor(ttlMs));
    // As markDeleted: their value is their duration; none on another tenant's session.
    await this.run.MARK_DELETED(
      [
        this.keys.meta(sid),
        this.keys.epoch(sid),
        ...keys.map((key) => this.keys.keyGone(sid, key)),
      ],
      [px, scope.tenantId],
    );
  }

  async listLength(scope: StoreScope, sid: string, key: string): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    return Math.max(await this.listLengthIfComplete(scope, sid, key), 0);
  }

  /**
   * The last index, or -1 when the list is not known whole here, or (`checkMs` > 0) was last
   * checked against the durable store longer ago than that (see LIST_CHECKED).
   */
  async listLengthIfComplete(
    scope: StoreScope,
    sid: string,
    key: string,
    checkMs = 0,
  ): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    return Number(
      await this.run.LIST_LENGTH(this.readKeys(sid, key, this.keys.list(sid, key)), [
        scope.tenantId,
        this.cacheMode ? '1' : '0',
        checkMs,
        key,
      ]),
    );
  }

  async exists(scope: StoreScope, sid: string): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sid, 'session id');
    const [owner, count] = await this.redis
      .multi()
      .hget(this.keys.meta(sid), 'tenant')
      .scard(this.keys.keys(sid))
      .exec()
      .then((r) => r!.map((x) => x[1]));
    return owner === scope.tenantId && Number(count) > 0;
  }

  async listSessionKeys(scope: StoreScope, sid: string): Promise<string[]> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sid, 'session id');
    if ((await this.redis.hget(this.keys.meta(sid), 'tenant')) !== scope.tenantId) return [];
    return (await this.redis.smembers(this.keys.keys(sid))).sort();
  }

  async deleteKey(scope: StoreScope, sid: string, key: string): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sid, key);
    await this.dropFromIndex(scope, sid, [key]);
    await this.run.DELETE_KEYS(
      [
        this.keys.meta(sid),
        this.keys.keys(sid),
        this.keys.value(sid, key),
        this.keys.list(sid, key),
      ],
      [scope.tenantId, key],
    );
  }

  async delete(scope: StoreScope, sid: string): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sid, 'session id');
    const [owner, user] = await this.redis.hmget(this.keys.meta(sid), 'tenant', 'user');
    if (owner !== scope.tenantId) return;
    const stateKeys = await this.redis.smembers(this.keys.keys(sid));
    await this.dropFromIndex(scope, sid, stateKeys, user);
    const targets = stateKeys.flatMap((k) => [this.keys.value(sid, k), this.keys.list(sid, k)]);
    if (this.cacheMode) {
      // A cache holds no fence of its own (the durable store keeps it); the records of writes
      // under way go with the keys (the deletion's tombstone refuses refills meanwhile).
      const records = stateKeys.map((k) => this.keys.writing(sid, k));
      await this.run.DELETE_KEYS(
        [this.keys.meta(sid), this.keys.keys(sid), ...targets, ...records, this.keys.fence(sid)],
        [scope.tenantId, ...stateKeys],
      );
      await this.redis.del(this.keys.meta(sid), this.keys.keys(sid));
      return;
    }
    await this.run.DELETE_KEYS(
      [this.keys.meta(sid), this.keys.keys(sid), ...targets],
      [scope.tenantId, ...stateKeys],
    );
    // The owner and fencing counter stay for an hour, as MySQL keeps its fence (see LEAVE_FENCE).
    await this.run.LEAVE_FENCE(this.writeKeys(sid, this.keys.fence(sid)), [
      scope.tenantId,
      rules.ORPHAN_FENCE_MS,
    ]);
  }

  /**
   * Drops cached state without an owner check (cache invalidation; the durable store decides),
   * and ends the session's refill epoch with it: a refill whose read missed before (its MySQL
   * read may predate the writes the dropped copy lacked, whose records the caller may end next:
   * a repair of missed hot writes) is refused however late it lands, rather than caching that
   * read for the key's TTL.
   */
  async purge(sid: string, key?: string): Promise<void> {
    assertId(sid, 'session id');
    if (key !== undefined) {
      assertStateKey(key);
      await this.redis.del(
        this.keys.value(sid, key),
        this.keys.list(sid, key),
        this.keys.epoch(sid),
      );
      return;
    }
    const stateKeys = await this.redis.smembers(this.keys.keys(sid));
    const targets = stateKeys.flatMap((k) => [this.keys.value(sid, k), this.keys.list(sid, k)]);
    await this.redis.del(
      this.keys.meta(sid),
      this.keys.keys(sid),
      this.keys.fence(sid),
      this.keys.epoch(sid),
      ...targets,
    );
  }

  /**
   * One step of dropping every cached session under the prefix (a whole-cache purge, when a
   * process lost track of which copies missed its writes): the sessions of one SCAN page of
   * `_keys` indexes. Returns the next cursor, '0' when the keyspace is done. Only for that
   * recovery: listing and deletion otherwise never scan. On a cluster, SCAN covers one node: the
   * cursor is then `<master>:<cursor>`, the masters' keyspaces one after the other.
   */
  async purgeStep(cursor: string, count = 100): Promise<string> {
    const head = this.keys.session('');
    const open = head.slice(0, -1); // `<prefix>s:{`
    const pattern = `${open.replace(/[*?[\]\\]/g, '\\$&')}*}:_keys`;
    const [next, found] = await this.scanStep(cursor, pattern, count);
    const sids = found
      .map((k) => k.slice(open.length, -'}:_keys'.length))
      .filter((sid) => isValidId(sid));
    await Promise.all(sids.map((sid) => this.purge(sid)));
    return next;
  }

  /** One SCAN page: of the server, or of one master of a cluster (cursor `<master>:<cursor>`). */
  private async scanStep(
    cursor: string,
    pattern: string,
    count: number,
  ): Promise<[string, string[]]> {
    if (!isCluster(this.redis)) return this.redis.scan(cursor, 'MATCH', pattern, 'COUNT', count);
    // Every master the slot table names, not only those pooled: one whose connection dropped
    // still holds its cached sessions (a master out of reach fails the step, tried again later).
    const nodes = (await slotMasters(this.redis)).sort((a, b) =>
      nodeName(a).localeCompare(nodeName(b)),
    );
    const [at, nodeCursor] = cursor.includes(':') ? cursor.split(':') : ['0', cursor];
    // No master known (the cluster not reached yet): a failure, never "the keyspace is done".
    if (nodes.length === 0) throw new Error('no master of the Redis Cluster is reachable');
    const node = Number(at);
    if (node >= nodes.length) return ['0', []];
    const [next, found] = await nodes[node].scan(nodeCursor, 'MATCH', pattern, 'COUNT', count);
    if (next !== '0') return [`${node}:${next}`, found];
    return [node + 1 < nodes.length ? `${node + 1}:0` : '0', found];
  }

  async listSessions(
    scope: StoreScope,
    key: string,
    page: { limit: number; before?: { updatedAt: Date; sessionId: string }; userId?: string },
  ): Promise<SessionSummary[]> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertStateKey(key);
    rules.assertPage(page);
    const max = page.before ? `(${page.before.updatedAt.getTime() + 1}` : '+inf';
    // Sessions updated in the cursor's millisecond at or after its id come first and are
    // skipped: read on past them, however many there are.
    const batch = page.limit + 50;
    const out: SessionSummary[] = [];
    for (let offset = 0; out.length < page.limit; offset += batch) {
      const raw = await this.redis.zrevrangebyscore(
        this.keys.index(scope.tenantId, key, page.userId),
        max,
        '-inf',
        'WITHSCORES',
        'LIMIT',
        offset,
        batch,
      );
      for (let i = 0; i < raw.length && out.length < page.limit; i += 2) {
        const summary = {
          sessionId: raw[i],
          userId: page.userId ?? null,
          updatedAt: new Date(Number(raw[i + 1])),
        };
        if (page.before && !isBefore(summary, page.before)) continue;
        out.push(summary);
      }
      if (raw.length < batch * 2) break;
    }
    const users = await this.usersOf(out.map((o) => o.sessionId));
    out.forEach((o, i) => (o.userId = users[i] ?? null));
    return out;
  }

  /** Each session's user: one pipeline; on a cluster one HGET each (they sit in many slots). */
  private async usersOf(sids: string[]): Promise<Array<string | null>> {
    if (sids.length === 0) return [];
    if (isCluster(this.redis))
      return Promise.all(sids.map((sid) => this.redis.hget(this.keys.meta(sid), 'user')));
    const res = await this.redis
      .pipeline(sids.map((sid) => ['hget', this.keys.meta(sid), 'user']))
      .exec();
    return sids.map((_, i) => (res?.[i]?.[1] as string | null) ?? null);
  }

  async nextFence(scope: StoreScope, sid: string): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sid, 'session id');
    const res = await this.run.NEXT_FENCE(this.writeKeys(sid, this.keys.fence(sid)), [
      scope.tenantId,
      rules.ORPHAN_FENCE_MS,
    ]);
    fail(res);
    return Number(res);
  }

  async close(): Promise<void> {
    if (this.opts.ownsConnection !== false) this.redis.disconnect();
  }

  private get cacheMode(): boolean {
    return this.opts.authoritative === false;
  }

  /** Refill epochs are a cache's: its reads' KEYS[5] is the key's `_writing` set. */
  private assertCache(): void {
    if (!this.cacheMode)
      throw new Error('refill epochs are only for a cache (authoritative: false)');
  }

  private check(sid: string, key: string): void {
    assertId(sid, 'session id');
    assertStateKey(key);
  }

  /**
   * What a refill of `key` checks: the tombstones of the session's deletion and of the key's, and
   * the key's durable writes under way.
   */
  private refillGuards(sid: string, key: string): string[] {
    return [this.keys.gone(sid), this.keys.keyGone(sid, key), this.keys.writing(sid, key)];
  }

  /** A read's keys: in a cache, also the key's `_writing` set (a lost write drops the copy). */
  private readKeys(sid: string, key: string, target: string): string[] {
    const keys = this.writeKeys(sid, target);
    return this.cacheMode ? [...keys, this.keys.writing(sid, key)] : keys;
  }

  /** writeKeys, and the execution's task value key when the write is an execution's. */
  private guardedKeys(sid: string, target: string, opts: WriteOptions): string[] {
    const keys = this.writeKeys(sid, target);
    return opts.execution ? [...keys, this.keys.value(sid, opts.execution.taskKey)] : keys;
  }

  private guardArgs(opts: WriteOptions): string[] {
    return opts.execution ? [opts.execution.agentSessionId] : [];
  }

  private writeKeys(sid: string, target: string): string[] {
    return [this.keys.meta(sid), this.keys.keys(sid), target, this.keys.fence(sid)];
  }

  private writeArgs(
    scope: StoreScope,
    key: string,
    json: string,
    opts: WriteOptions,
  ): Array<string | number> {
    return [
      scope.tenantId,
      key,
      json,
      (opts.ttlSeconds ?? 0) * 1000,
      opts.userId ?? '',
      Date.now(),
      opts.fence ?? '',
    ];
  }

  private async touchIndex(
    scope: StoreScope,
    sid: string,
    key: string,
    userId?: string,
  ): Promise<void> {
    if (this.cacheMode) return;
    const now = Date.now();
    const pipe = this.redis.pipeline().zadd(this.keys.index(scope.tenantId, key), now, sid);
    const user = userId ?? (await this.redis.hget(this.keys.meta(sid), 'user'));
    if (user) pipe.zadd(this.keys.index(scope.tenantId, key, user), now, sid);
    await pipe.exec();
  }

  /** `user`: the session's, when the caller has read it already (else it is read here). */
  private async dropFromIndex(
    scope: StoreScope,
    sid: string,
    stateKeys: string[],
    user?: string | null,
  ): Promise<void> {
    // A cache keeps no session index, and so needs no user either.
    if (this.cacheMode || stateKeys.length === 0) return;
    if (user === undefined) user = await this.redis.hget(this.keys.meta(sid), 'user');
    if ((await this.redis.hget(this.keys.meta(sid), 'tenant')) !== scope.tenantId) return;
    const pipe = this.redis.pipeline();
    for (const k of stateKeys) {
      pipe.zrem(this.keys.index(scope.tenantId, k), sid);
      if (user) pipe.zrem(this.keys.index(scope.tenantId, k, user), sid);
    }
    await pipe.exec();
  }
}

/** A value as Redis holds it: the absent marker, or JSON. */
function found<T>(raw: string): { value: T } | typeof ABSENT {
  return raw === ABSENT_MARKER ? ABSENT : { value: decodeValue<T>(raw) };
}

function isBefore(s: SessionSummary, cursor: { updatedAt: Date; sessionId: string }): boolean {
  const d = s.updatedAt.getTime() - cursor.updatedAt.getTime();
  return d < 0 || (d === 0 && s.sessionId < cursor.sessionId);
}

function fail(res: unknown): void {
  if (res === -1) throw new LoomError(LoomErrorCode.NOT_FOUND, 'session not found');
  if (res === -2)
    throw new LoomError(
      LoomErrorCode.STALE_FENCING_TOKEN,
      'the fencing token is stale: another holder took the lock',
    );
  if (res === -3) throw new LoomError(LoomErrorCode.CONFLICT, 'that list index is taken');
  if (res === -4) throw rules.executionSuperseded();
}

function nodeName(node: RedisClient): string {
  const { host, port } = node.options as { host?: string; port?: number };
  return `${host}:${port}`;
}
