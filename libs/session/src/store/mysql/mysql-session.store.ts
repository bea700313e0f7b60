import { DataSource } from 'typeorm';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { assertId, assertPrincipal, assertStateKey } from '../../ids';
import {
  AppendOptions,
  ListItem,
  ListRange,
  SessionStore,
  SessionSummary,
  StoreScope,
  WriteOptions,
} from '../session-store';
import { decodeValue, encodeValue } from '../codec';
import * as rules from '../memory/store-rules';
import { queryWithin } from './bounded-query';
import { asUnavailable } from './mysql-errors';

const TABLE = 'loom_session_state';
const FENCE_KEY = '_fence';
/** The single value whose expiry makes the sweeper purge a session (deleted last). */
const CONVERSATION_KEY = 'conversation';
const COLS = 'session_id, state_key, item_index, tenant_id, user_id, state_data, expires_at';
const ER_DUP_ENTRY = 1062;
const ER_LOCK_DEADLOCK = 1213;
/** A single value replaces the previous one, keeping its owner and creation time. */
const UPSERT =
  'ON DUPLICATE KEY UPDATE state_data = VALUES(state_data), expires_at = VALUES(expires_at), ' +
  `user_id = COALESCE(VALUES(user_id), ${TABLE}.user_id), updated_at = CURRENT_TIMESTAMP(3)`;
const MAX_APPEND_ATTEMPTS = 200;
/** List items one statement of a session's deletion removes at most. */
const DELETE_BATCH = 5000;
/** How long a fence alone under a session id is kept after its last issue (ms). */
const ORPHAN_FENCE_MS = 3_600_000;
/** How long a deadlocked statement is retried before the caller gets UNAVAILABLE (ms). */
const DEADLOCK_RETRY_MS = 5_000;
/** How long a statement may go unanswered before the caller gets UNAVAILABLE (ms). */
const QUERY_TIMEOUT_MS = 10_000;
/** True while the session is the tenant's or holds no row yet (params: session, tenant, tenant). */
const OWNED = `COALESCE((SELECT o.tenant_id FROM ${TABLE} o WHERE o.session_id = ? LIMIT 1), ?) = ?`;

interface WriteResult {
  affectedRows: number;
  insertId: number;
}

/**
 * The durable backend: the only code that touches the session table. Every write checks the
 * session's owner; an append is one INSERT whatever the list's length, and the primary key is
 * what keeps indexes unique under any concurrency (a duplicate means someone else won: retry).
 */
export class MysqlSessionStore implements SessionStore {
  readonly kind = 'mysql';

  private readonly queryTimeoutMs: number;
  private readonly deleteBatch: number;

  /** `deleteBatch`: list items one statement of `delete` removes at most (default 5000). */
  constructor(
    private readonly db: DataSource,
    opts: { queryTimeoutMs?: number; deleteBatch?: number } = {},
  ) {
    this.queryTimeoutMs = opts.queryTimeoutMs ?? QUERY_TIMEOUT_MS;
    this.deleteBatch = Math.max(1, Math.floor(opts.deleteBatch ?? DELETE_BATCH));
  }

  async save(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    await this.insertRow(scope, sessionId, key, 0, encodeValue(value), opts, UPSERT);
  }

  async create(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    try {
      await this.insertRow(scope, sessionId, key, 0, encodeValue(value), opts);
      return true;
    } catch (err) {
      if (errno(err) === ER_DUP_ENTRY) return false;
      if (!LoomError.is(err, LoomErrorCode.NOT_FOUND)) throw err;
      // Another tenant's session: "exists" if it holds this key, else it reads as missing.
      const taken = await this.query(
        `SELECT 1 FROM ${TABLE} WHERE session_id = ? AND state_key = ? AND item_index = 0`,
        [sessionId, key],
      );
      if (taken.length) return false;
      throw err;
    }
  }

  async get<T>(scope: StoreScope, sessionId: string, key: string): Promise<T | null> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    const rows: Array<{ state_data: string }> = await this.query(
      `SELECT state_data FROM ${TABLE} WHERE session_id = ? AND state_key = ? AND item_index = 0 AND tenant_id = ?`,
      [sessionId, key, scope.tenantId],
    );
    return rows.length ? decodeValue<T>(rows[0].state_data) : null;
  }

  /**
   * Several single values of one session, in the order of `keys` (null where absent), read by
   * one statement: as they all stood at one moment.
   */
  async getMany<T>(scope: StoreScope, sessionId: string, keys: string[]): Promise<Array<T | null>> {
    assertPrincipal(scope.tenantId, 'tenant id');
    keys.forEach((k) => this.check(sessionId, k));
    if (keys.length === 0) return [];
    const rows: Array<{ state_key: string; state_data: string }> = await this.query(
      `SELECT state_key, state_data FROM ${TABLE} WHERE session_id = ? AND state_key IN ` +
        `(${keys.map(() => '?').join(', ')}) AND item_index = 0 AND tenant_id = ?`,
      [sessionId, ...keys, scope.tenantId],
    );
    const found = new Map(rows.map((r) => [r.state_key, r.state_data]));
    return keys.map((k) => {
      const data = found.get(k);
      return data === undefined ? null : decodeValue<T>(data);
    });
  }

  async append(
    scope: StoreScope,
    sessionId: string,
    key: string,
    item: unknown,
    opts: AppendOptions = {},
  ): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    const data = encodeValue(item);
    rules.assertWriteOptions(opts);
    // Uncontended, one statement computes the next index as it inserts. Its read of the list's
    // end is a locking one, so concurrent appenders can deadlock on the gap they all insert into:
    // then this append reads the end without locking and races on the primary key instead.
    let contended = false;
    for (let attempt = 1; ; attempt++) {
      const index = opts.index ?? (contended ? (await this.lastIndex(sessionId, key)) + 1 : 'next');
      try {
        return await this.insertRow(scope, sessionId, key, index, data, opts);
      } catch (err) {
        const code = errno(err);
        if (opts.index !== undefined && code === ER_DUP_ENTRY) {
          throw new LoomError(LoomErrorCode.CONFLICT, `index ${opts.index} of ${key} is taken`);
        }
        if (code === ER_LOCK_DEADLOCK && index === 'next') contended = true;
        else if (code !== ER_DUP_ENTRY) throw err;
        // A concurrent append took the same index first: try the next one, within reason.
        else if (attempt >= MAX_APPEND_ATTEMPTS)
          throw new LoomError(LoomErrorCode.UNAVAILABLE, `the list ${key} is too contended; retry`);
      }
    }
  }

  async getList<T>(
    scope: StoreScope,
    sessionId: string,
    key: string,
    range: ListRange = {},
  ): Promise<ListItem<T>[]> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    rules.assertRange(range);
    const where = 'session_id = ? AND state_key = ? AND tenant_id = ? AND item_index > ?';
    const params: unknown[] = [sessionId, key, scope.tenantId, Math.max(range.afterIndex ?? 0, 0)];
    let rows: Array<{ item_index: number; state_data: string }>;
    if (range.last !== undefined) {
      rows = await this.query(
        `SELECT item_index, state_data FROM ${TABLE} WHERE ${where} ORDER BY item_index DESC LIMIT ?`,
        [...params, Math.max(range.last, 0)],
      );
      rows.reverse();
      if (range.limit !== undefined) rows = rows.slice(0, Math.max(range.limit, 0));
    } else {
      const limit =
        range.limit !== undefined ? ` LIMIT ${Math.max(Math.floor(range.limit), 0)}` : '';
      rows = await this.query(
        `SELECT item_index, state_data FROM ${TABLE} WHERE ${where} ORDER BY item_index${limit}`,
        params,
      );
    }
    return rows.map((r) => ({ index: Number(r.item_index), value: decodeValue<T>(r.state_data) }));
  }

  async listLength(scope: StoreScope, sessionId: string, key: string): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    const rows: Array<{ n: number | null }> = await this.query(
      `SELECT MAX(item_index) AS n FROM ${TABLE} WHERE session_id = ? AND state_key = ? AND tenant_id = ? AND item_index > 0`,
      [sessionId, key, scope.tenantId],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async exists(scope: StoreScope, sessionId: string): Promise<boolean> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sessionId, 'session id');
    const rows = await this.query(
      `SELECT 1 FROM ${TABLE} WHERE session_id = ? AND tenant_id = ? AND state_key <> '${FENCE_KEY}' LIMIT 1`,
      [sessionId, scope.tenantId],
    );
    return rows.length > 0;
  }

  async listSessionKeys(scope: StoreScope, sessionId: string): Promise<string[]> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sessionId, 'session id');
    const rows: Array<{ state_key: string }> = await this.query(
      `SELECT state_key FROM ${TABLE} WHERE session_id = ? AND tenant_id = ? AND state_key <> '${FENCE_KEY}' GROUP BY state_key`,
      [sessionId, scope.tenantId],
    );
    return rows.map((r) => r.state_key).sort();
  }

  async deleteKey(scope: StoreScope, sessionId: string, key: string): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    await this.query(
      `DELETE FROM ${TABLE} WHERE session_id = ? AND state_key = ? AND tenant_id = ?`,
      [sessionId, key, scope.tenantId],
    );
  }

  /**
   * Removes a single value only while its JSON `fence` field is absent or at most `fence`, in one
   * statement (the run index: a late remover leaves a newer owner's entry alone).
   */
  async deleteValueUpToFence(
    scope: StoreScope,
    sessionId: string,
    key: string,
    fence: number,
  ): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    this.check(sessionId, key);
    await this.query(
      `DELETE FROM ${TABLE} WHERE session_id = ? AND state_key = ? AND tenant_id = ? AND item_index = 0 ` +
        "AND (JSON_EXTRACT(state_data, '$.fence') IS NULL OR JSON_EXTRACT(state_data, '$.fence') <= ?)",
      [sessionId, key, scope.tenantId, fence],
    );
  }

  /** Removes several state keys of one session in one statement. */
  async deleteKeys(scope: StoreScope, sessionId: string, keys: string[]): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    keys.forEach((k) => this.check(sessionId, k));
    if (keys.length === 0) return;
    await this.query(
      `DELETE FROM ${TABLE} WHERE session_id = ? AND state_key IN ` +
        `(${keys.map(() => '?').join(', ')}) AND tenant_id = ?`,
      [sessionId, ...keys, scope.tenantId],
    );
  }

  /**
   * Removes the session, all but its fencing counter: a holder paused across the deletion must
   * stay fenced out when the id is locked again (a waiting turn, the id created again), which a
   * counter starting over at 1 would let back in. The counter is left to expire like any fence
   * alone (an hour after its last issue; see sweepOrphanFences): its expiry is set first, so a
   * failure between the two statements leaves a live session's fence, which the sweeper keeps.
   */
  async delete(scope: StoreScope, sessionId: string): Promise<void> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sessionId, 'session id');
    await this.query(
      `UPDATE ${TABLE} SET expires_at = CURRENT_TIMESTAMP(3) + INTERVAL ${ORPHAN_FENCE_MS * 1000} MICROSECOND ` +
        `WHERE session_id = ? AND state_key = '${FENCE_KEY}' AND item_index = 0 AND tenant_id = ?`,
      [sessionId, scope.tenantId],
    );
    // Its single values but the `conversation` row go first: its task rows are what an agent
    // execution's writes re-check (WriteOptions.execution), so none lands after this statement,
    // where the list items below would no longer be deleted. Then a long log goes in bounded
    // statements (no one DELETE holds locks on 100k rows), and the `conversation` row last: a
    // failure midway leaves it, whose expiry brings the sweeper back, never rows nothing would
    // ever remove.
    await this.query(
      `DELETE FROM ${TABLE} WHERE session_id = ? AND tenant_id = ? AND item_index = 0 ` +
        `AND state_key NOT IN ('${FENCE_KEY}', '${CONVERSATION_KEY}')`,
      [sessionId, scope.tenantId],
    );
    for (;;) {
      const res: WriteResult = await this.query(
        `DELETE FROM ${TABLE} WHERE session_id = ? AND tenant_id = ? AND item_index > 0 ` +
          `LIMIT ${this.deleteBatch}`,
        [sessionId, scope.tenantId],
      );
      if (res.affectedRows < this.deleteBatch) break;
    }
    await this.query(
      `DELETE FROM ${TABLE} WHERE session_id = ? AND tenant_id = ? AND item_index = 0 ` +
        `AND state_key <> '${FENCE_KEY}'`,
      [sessionId, scope.tenantId],
    );
  }

  async listSessions(
    scope: StoreScope,
    key: string,
    page: { limit: number; before?: { updatedAt: Date; sessionId: string }; userId?: string },
  ): Promise<SessionSummary[]> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertStateKey(key);
    rules.assertPage(page);
    if (page.limit === 0) return [];
    const where = ['tenant_id = ?', 'state_key = ?', 'item_index = 0'];
    const params: unknown[] = [scope.tenantId, key];
    if (page.userId !== undefined) {
      where.push('user_id = ?');
      params.push(page.userId);
    }
    if (page.before) {
      where.push('(updated_at < ? OR (updated_at = ? AND session_id < ?))');
      params.push(page.before.updatedAt, page.before.updatedAt, page.before.sessionId);
    }
    const rows: Array<{ session_id: string; user_id: string | null; updated_at: Date }> =
      await this.query(
        `SELECT session_id, user_id, updated_at FROM ${TABLE} WHERE ${where.join(' AND ')} ` +
          `ORDER BY updated_at DESC, session_id DESC LIMIT ${Math.max(1, Math.min(Math.floor(page.limit), 1000))}`,
        params,
      );
    return rows.map((r) => ({
      sessionId: r.session_id,
      userId: r.user_id,
      updatedAt: new Date(r.updated_at),
    }));
  }

  /**
   * The next fencing token. A fence issued where the session holds nothing else (a turn that
   * waited for the lock of a conversation deleted meanwhile) expires an hour after its last
   * issue, so the sweeper can remove it (sweepOrphanFences); any other fence never expires.
   */
  async nextFence(scope: StoreScope, sessionId: string): Promise<number> {
    assertPrincipal(scope.tenantId, 'tenant id');
    assertId(sessionId, 'session id');
    const expiry =
      `IF(EXISTS(SELECT 1 FROM ${TABLE} x WHERE x.session_id = ? AND x.state_key <> '${FENCE_KEY}'), ` +
      `NULL, CURRENT_TIMESTAMP(3) + INTERVAL ${ORPHAN_FENCE_MS * 1000} MICROSECOND)`;
    const res: WriteResult = await this.query(
      `INSERT INTO ${TABLE} (${COLS}) SELECT ?, '${FENCE_KEY}', 0, ?, NULL, LAST_INSERT_ID(1), ${expiry} ` +
        `FROM DUAL WHERE ${OWNED} ` +
        'ON DUPLICATE KEY UPDATE state_data = LAST_INSERT_ID(CAST(state_data AS UNSIGNED) + 1), ' +
        'expires_at = VALUES(expires_at)',
      [sessionId, scope.tenantId, sessionId, sessionId, scope.tenantId, scope.tenantId],
    );
    if (res.affectedRows === 0) throw notFound();
    return Number(res.insertId);
  }

  /**
   * Removes rows whose durable expiry has passed, one bounded batch; returns how many went.
   * `exceptKeys` are left alone (e.g. `conversation`, whose expiry means "purge the whole session").
   */
  async sweepExpired(
    now = new Date(),
    batch = 1000,
    opts: { exceptKeys?: string[] } = {},
  ): Promise<number> {
    // A fence's expiry means "remove it if it is alone" (sweepOrphanFences), never "remove it".
    const except = [...(opts.exceptKeys ?? []), FENCE_KEY];
    except.forEach((k) => assertStateKey(k));
    const skip = except.length ? ` AND state_key NOT IN (${except.map(() => '?').join(', ')})` : '';
    const res: WriteResult = await this.query(
      `DELETE FROM ${TABLE} WHERE expires_at IS NOT NULL AND expires_at < ?${skip} LIMIT ${Math.floor(batch)}`,
      [now, ...except],
    );
    return res.affectedRows;
  }

  /**
   * Removes `_fence` rows whose session holds nothing else and whose fence was last issued more
   * than an hour before `now` (see nextFence), one bounded batch; returns how many went. Loom's
   * own `_sys_` sessions keep theirs. The statement re-checks that nothing else is there and that
   * the fence was not issued since, so a lock taken meanwhile keeps its fence. A fence whose
   * session holds rows again (the id was created again) stops expiring.
   */
  async sweepOrphanFences(now = new Date(), batch = 1000): Promise<number> {
    const rows: Array<{ session_id: string }> = await this.query(
      `SELECT session_id FROM ${TABLE} WHERE expires_at IS NOT NULL AND expires_at < ? ` +
        `AND state_key = '${FENCE_KEY}' AND item_index = 0 AND session_id NOT LIKE '\\_sys\\_%' ` +
        `ORDER BY expires_at LIMIT ${Math.max(1, Math.floor(batch))}`,
      [now],
    );
    if (rows.length === 0) return 0;
    const ids = rows.map((r) => r.session_id);
    const marks = ids.map(() => '?').join(', ');
    const res: WriteResult = await this.query(
      `DELETE f FROM ${TABLE} f LEFT JOIN ${TABLE} o ON o.session_id = f.session_id ` +
        `AND o.state_key <> '${FENCE_KEY}' WHERE f.session_id IN (${marks}) ` +
        `AND f.state_key = '${FENCE_KEY}' AND f.item_index = 0 AND f.expires_at < ? AND o.session_id IS NULL`,
      [...ids, now],
    );
    await this.query(
      `UPDATE ${TABLE} SET expires_at = NULL WHERE session_id IN (${marks}) ` +
        `AND state_key = '${FENCE_KEY}' AND item_index = 0 AND expires_at < ?`,
      [...ids, now],
    );
    return res.affectedRows;
  }

  /** Sessions whose single value `key` expired before `now`, oldest expiry first (any tenant). */
  async expiredSessions(
    key: string,
    now: Date,
    limit: number,
  ): Promise<Array<{ sessionId: string; tenantId: string }>> {
    assertStateKey(key);
    const rows: Array<{ session_id: string; tenant_id: string }> = await this.query(
      `SELECT session_id, tenant_id FROM ${TABLE} WHERE expires_at IS NOT NULL AND expires_at < ? ` +
        `AND state_key = ? AND item_index = 0 ORDER BY expires_at LIMIT ${Math.max(1, Math.floor(limit))}`,
      [now, key],
    );
    return rows.map((r) => ({ sessionId: r.session_id, tenantId: r.tenant_id }));
  }

  async close(): Promise<void> {
    if (this.db.isInitialized) await this.db.destroy();
  }

  /**
   * Every statement goes through here: a lost or refused connection, or contention that outlasts
   * the retries, becomes UNAVAILABLE. Each statement is its own (autocommit) transaction, so one
   * InnoDB rolled back to break a deadlock had no effect and runs again, after a random pause
   * that grows with each attempt, for up to DEADLOCK_RETRY_MS (writes take locks on the rows and
   * gaps their guards read, and a gap can reach into a neighbouring session's rows).
   * `onDeadlock: 'throw'` hands the raw deadlock to the caller, which has a better way out.
   * No statement waits longer than queryTimeoutMs: a database that stops answering without
   * closing its connections (frozen, partitioned, failing over) gives UNAVAILABLE, not a hang.
   * Like a lost connection, this tells nothing of whether the statement committed; writes are
   * ordered and fenced so that either way is recoverable.
   */
  private async query<T = any>(
    sql: string,
    params?: unknown[],
    opts: { onDeadlock?: 'retry' | 'throw' } = {},
  ): Promise<T> {
    const giveUpAt = Date.now() + DEADLOCK_RETRY_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        return await queryWithin<T>(this.db, sql, params, this.queryTimeoutMs);
      } catch (err) {
        if (errno(err) === ER_LOCK_DEADLOCK) {
          if (opts.onDeadlock === 'throw') throw err;
          if (Date.now() < giveUpAt) {
            const pauseMs = Math.random() * Math.min(2 ** attempt, 50);
            await new Promise((r) => setTimeout(r, pauseMs));
            continue;
          }
        }
        throw asUnavailable(err);
      }
    }
  }

  private check(sessionId: string, key: string): void {
    assertId(sessionId, 'session id');
    assertStateKey(key);
  }

  /**
   * One row, in one statement that also enforces who may write it: an INSERT … SELECT whose
   * SELECT yields a row only while the session is this tenant's (or has no rows yet) and, with a
   * fence, only while the session's `_fence` row still holds that token (read under a shared
   * lock, so a new holder's fence waits for this write); with an execution guard, only while its
   * task row is RUNNING and does not list the execution as FAILED (read likewise, so a task write
   * that gives it up is ordered with this one). `index` 'next' writes at MAX + 1 of the
   * list, computed in the same statement and returned through LAST_INSERT_ID. Nothing written:
   * NOT_FOUND (another tenant's session), STALE_FENCING_TOKEN or SUPERSEDED. The connection reports found
   * rows, so an upsert that changes nothing still counts one.
   */
  private async insertRow(
    scope: StoreScope,
    sessionId: string,
    key: string,
    index: number | 'next',
    data: string,
    opts: WriteOptions,
    onDuplicate = '',
  ): Promise<number> {
    rules.assertWriteOptions(opts);
    const next = index === 'next';
    const indexSql = next
      ? `LAST_INSERT_ID(COALESCE((SELECT MAX(m.item_index) FROM ${TABLE} m ` +
        'WHERE m.session_id = ? AND m.state_key = ?), 0) + 1)'
      : '?';
    const indexParams = next ? [sessionId, key] : [index];
    const values = [
      sessionId,
      key,
      ...indexParams,
      scope.tenantId,
      opts.userId ?? null,
      data,
      opts.expiresAt ?? null,
    ];
    const fenced = opts.fence !== undefined;
    const { source, sourceParams } = fenced
      ? {
          source:
            `FROM ${TABLE} f WHERE f.session_id = ? AND f.state_key = '${FENCE_KEY}' ` +
            'AND f.item_index = 0 AND f.tenant_id = ? AND f.state_data = ?',
          sourceParams: [sessionId, scope.tenantId, String(opts.fence)],
        }
      : opts.execution
        ? {
            // The execution's task row, this tenant's, RUNNING and not listing it as FAILED.
            source:
              `FROM ${TABLE} t WHERE t.session_id = ? AND t.state_key = ? AND t.item_index = 0 ` +
              "AND t.tenant_id = ? AND JSON_UNQUOTE(JSON_EXTRACT(t.state_data, '$.status')) = 'RUNNING' " +
              "AND NOT COALESCE(JSON_CONTAINS(JSON_EXTRACT(t.state_data, '$.executions'), " +
              "JSON_OBJECT('agentSessionId', ?, 'status', 'FAILED')), 0)",
            sourceParams: [
              sessionId,
              opts.execution.taskKey,
              scope.tenantId,
              opts.execution.agentSessionId,
            ],
          }
        : {
            source: `FROM DUAL WHERE ${OWNED}`,
            sourceParams: [sessionId, scope.tenantId, scope.tenantId],
          };
    // A deadlocked 'next' append is retried by append(), which then avoids the locking read.
    const res = await this.query<WriteResult>(
      `INSERT INTO ${TABLE} (${COLS}) SELECT ?, ?, ${indexSql}, ?, ?, ?, ? ${source} ${onDuplicate}`,
      [...values, ...sourceParams],
      { onDeadlock: next ? 'throw' : 'retry' },
    );
    if (res.affectedRows === 0) {
      if (!fenced && !opts.execution) throw notFound();
      const owner = await this.ownerOf(sessionId);
      if (owner !== null && owner !== scope.tenantId) throw notFound();
      throw fenced ? stale() : rules.executionSuperseded();
    }
    return next ? Number(res.insertId) : index;
  }

  /** The list's highest index (0 when empty), by a plain, non-locking read. */
  private async lastIndex(sessionId: string, key: string): Promise<number> {
    const rows: Array<{ n: number | null }> = await this.query(
      `SELECT MAX(item_index) AS n FROM ${TABLE} WHERE session_id = ? AND state_key = ?`,
      [sessionId, key],
    );
    return Number(rows[0]?.n ?? 0);
  }

  private async ownerOf(sessionId: string): Promise<string | null> {
    const rows: Array<{ tenant_id: string }> = await this.query(
      `SELECT tenant_id FROM ${TABLE} WHERE session_id = ? LIMIT 1`,
      [sessionId],
    );
    return rows.length ? rows[0].tenant_id : null;
  }
}

function errno(err: unknown): number | undefined {
  const e = err as { errno?: number; driverError?: { errno?: number } };
  return e?.driverError?.errno ?? e?.errno;
}

function notFound(): LoomError {
  return new LoomError(LoomErrorCode.NOT_FOUND, 'session not found');
}

function stale(): LoomError {
  return new LoomError(
    LoomErrorCode.STALE_FENCING_TOKEN,
    'the fencing token is stale: another holder took the lock',
  );
}
