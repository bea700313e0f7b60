import { rm } from 'fs/promises';
import { resolve, sep } from 'path';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { assertStateKey } from '../../ids';
import * as rules from '../memory/store-rules';
import type {
  AppendOptions,
  ListItem,
  ListRange,
  SessionStore,
  SessionSummary,
  StoreScope,
  WriteOptions,
} from '../session-store';
import * as files from './session-files';
import { appendItem, forgetLists, readList } from './list-file';
import { drain, serialised } from './session-lock';

/**
 * The Session API on the file system (the embedded profile), one directory per session:
 *   <base>/<sessionId>/_meta.json   owner tenant, fencing counter, updatedAt/userId per value, lists
 *   <base>/<sessionId>/<key>.json   a single value, replaced atomically (temp file + rename)
 *   <base>/<sessionId>/<key>.jsonl  a list, one `{"index":n,"value":…}` line per item, appended
 *
 * For ONE process only: writes to a session are serialised by an in-process promise chain, and the
 * next list index is cached in process. Several processes sharing a directory would corrupt lists.
 * Every write is durable before it is acknowledged: an appended line is synced (fdatasync), a
 * replaced file synced before its rename, and a directory synced after a file or directory is
 * created, renamed or removed in it. A crash mid-append can leave a torn last line (never one that
 * was acknowledged): it is ignored, and cut off before the next append. ttlSeconds and expiresAt
 * are not applied. The state key `_meta` is reserved.
 * A deleted session leaves nothing on disk; its owner and fencing counter stay in this process's
 * memory for an hour (ORPHAN_FENCE_MS), as MySQL keeps its fence, and so does a fence issued
 * where the session holds nothing else (see FenceRemnant); `now` is the clock that expiry is read
 * on (tests).
 */
export class FileSessionStore implements SessionStore {
  readonly kind = 'file';
  private readonly base: string;
  private readonly now: () => number;

  constructor(baseDir: string, opts: { now?: () => number } = {}) {
    this.base = resolve(baseDir);
    this.now = opts.now ?? Date.now;
  }

  async save(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<void> {
    await this.writeValue(scope, sessionId, key, value, opts, false);
  }

  async create(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions = {},
  ): Promise<boolean> {
    return this.writeValue(scope, sessionId, key, value, opts, true);
  }

  async get<T>(scope: StoreScope, sessionId: string, key: string): Promise<T | null> {
    const { dir, value: file } = this.locate(scope, sessionId, key);
    if (!(await files.ownedMeta(scope.tenantId, dir, this.now()))) return null;
    const text = await files.readText(file);
    return text === null ? null : files.parseStored<T>(text, file);
  }

  async append(
    scope: StoreScope,
    sessionId: string,
    key: string,
    item: unknown,
    opts: AppendOptions = {},
  ): Promise<number> {
    const { dir, list: file } = this.locate(scope, sessionId, key, opts);
    const text = rules.toJson(item);
    return this.writing(dir, async () => {
      await this.checkExecution(scope, dir, opts);
      const meta = await files.claimMeta(scope.tenantId, dir, opts.fence, this.now());
      if (!meta.lists.has(key)) {
        await files.writeMeta(dir, { ...meta, lists: new Set([...meta.lists, key]) });
      }
      return appendItem(file, text, opts.index);
    });
  }

  async getList<T>(
    scope: StoreScope,
    sessionId: string,
    key: string,
    range?: ListRange,
  ): Promise<ListItem<T>[]> {
    const { dir, list: file } = this.locate(scope, sessionId, key);
    const items = (await files.ownedMeta(scope.tenantId, dir, this.now()))
      ? (await readList(file)).items
      : [];
    return rules.applyRange(items as ListItem<T>[], range);
  }

  /** The last index of the list (equal to its length while indexes are contiguous); 0 when absent. */
  async listLength(scope: StoreScope, sessionId: string, key: string): Promise<number> {
    const { dir, list: file } = this.locate(scope, sessionId, key);
    if (!(await files.ownedMeta(scope.tenantId, dir, this.now()))) return 0;
    return (await readList(file)).items.at(-1)?.index ?? 0;
  }

  async exists(scope: StoreScope, sessionId: string): Promise<boolean> {
    return (await this.listSessionKeys(scope, sessionId)).length > 0;
  }

  async listSessionKeys(scope: StoreScope, sessionId: string): Promise<string[]> {
    const meta = await files.ownedMeta(
      scope.tenantId,
      this.locate(scope, sessionId).dir,
      this.now(),
    );
    return meta ? [...new Set([...meta.values.keys(), ...meta.lists])].sort() : [];
  }

  async deleteKey(scope: StoreScope, sessionId: string, key: string): Promise<void> {
    const { dir, value, list } = this.locate(scope, sessionId, key);
    await this.writing(dir, async () => {
      const meta = await files.ownedMeta(scope.tenantId, dir, this.now());
      if (!meta) return;
      await Promise.all([rm(value, { force: true }), rm(list, { force: true })]);
      forgetLists(list);
      meta.values.delete(key);
      meta.lists.delete(key);
      await files.writeMeta(dir, meta);
    });
  }

  /**
   * Removes the session's directory, all of it (another tenant's session: no-op): nothing of a
   * deleted session stays on disk. Its owner and fencing counter stay in memory (a session never
   * fenced: nothing), so a holder paused across the deletion stays fenced out when the id is locked
   * again, rather than matching a counter started over at 1. They lapse an hour later unless the
   * session is written again. The directory is renamed away first, so a crash midway leaves no
   * half session under the id (what it left is removed by the next deletion).
   */
  async delete(scope: StoreScope, sessionId: string): Promise<void> {
    const { dir } = this.locate(scope, sessionId);
    await this.writing(dir, async () => {
      const now = this.now();
      const owner = await files.readOwner(dir, now);
      if (owner?.tenantId !== scope.tenantId) return;
      await files.removeSessionDir(this.base, dir);
      forgetLists(dir, true);
      if (owner.fence === 0) {
        // No counter to keep (never locked): nothing stays, as MySQL keeps no row then.
        files.forgetFenceRemnant(dir);
        return;
      }
      files.keepFenceRemnant(
        dir,
        { tenantId: owner.tenantId, fence: owner.fence, expiresAt: now + rules.ORPHAN_FENCE_MS },
        now,
      );
    });
  }

  async listSessions(
    scope: StoreScope,
    key: string,
    page: rules.SessionPage,
  ): Promise<SessionSummary[]> {
    rules.assertScope(scope);
    assertStateKey(key);
    rules.assertPage(page);
    const rows = (await files.readAllMetas(this.base)).flatMap(({ sessionId, meta }) => {
      const entry = meta.tenantId === scope.tenantId ? meta.values.get(key) : undefined;
      return entry ? [{ sessionId, ...entry }] : [];
    });
    return rules.pageSessions(rows, page);
  }

  async nextFence(scope: StoreScope, sessionId: string): Promise<number> {
    const { dir } = this.locate(scope, sessionId);
    return this.writing(dir, async () => {
      const now = this.now();
      const meta = await files.readMeta(dir, now);
      if (meta && meta.tenantId !== scope.tenantId) throw rules.sessionNotFound();
      if (meta && (meta.values.size > 0 || meta.lists.size > 0)) {
        meta.fence += 1;
        meta.fenceExpiresAt = undefined;
        await files.writeMeta(dir, meta);
        return meta.fence;
      }
      // Where the session holds nothing else, the fence lives in memory alone and lapses an hour
      // after (as in MySQL): a turn that waited for a conversation deleted meanwhile leaves no file.
      const remnant = files.fenceRemnant(dir, now);
      if (!meta && remnant && remnant.tenantId !== scope.tenantId) throw rules.sessionNotFound();
      const fence = Math.max(meta?.fence ?? 0, remnant?.fence ?? 0) + 1;
      // An empty meta, a fence an earlier version left on disk alone, or files without a meta.
      if (meta || (await files.fileExists(dir))) await files.removeSessionDir(this.base, dir);
      forgetLists(dir, true);
      const expiresAt = now + rules.ORPHAN_FENCE_MS;
      files.keepFenceRemnant(dir, { tenantId: scope.tenantId, fence, expiresAt }, now);
      return fence;
    });
  }

  /** Waits for the writes under way; there is nothing else to release. */
  async close(): Promise<void> {
    await drain(this.base + sep);
  }

  private async writeValue(
    scope: StoreScope,
    sessionId: string,
    key: string,
    value: unknown,
    opts: WriteOptions,
    onlyIfAbsent: boolean,
  ): Promise<boolean> {
    const { dir, value: file } = this.locate(scope, sessionId, key, opts);
    const text = rules.toJson(value);
    return this.writing(dir, async () => {
      if (onlyIfAbsent && (await files.fileExists(file))) {
        // A stale holder is told so before it learns that the key exists (as MySQL answers).
        const meta = await files.ownedMeta(scope.tenantId, dir, this.now());
        if (meta) rules.checkFence(meta.fence, opts.fence);
        return false;
      }
      await this.checkExecution(scope, dir, opts);
      const meta = await files.claimMeta(scope.tenantId, dir, opts.fence, this.now());
      await files.writeAtomic(file, text);
      const userId = opts.userId ?? meta.values.get(key)?.userId ?? null;
      meta.values.set(key, { updatedAt: new Date(), userId });
      await files.writeMeta(dir, meta);
      return true;
    });
  }

  /** Runs a write under the session's chain; a file system that takes no writes is UNAVAILABLE. */
  private writing<T>(dir: string, work: () => Promise<T>): Promise<T> {
    return serialised(dir, work).catch((err: unknown) => {
      throw files.noWritesAsUnavailable(err);
    });
  }

  /** WriteOptions.execution, inside the session's serialised section (another tenant's: NOT_FOUND). */
  private async checkExecution(scope: StoreScope, dir: string, opts: WriteOptions): Promise<void> {
    if (!opts.execution) return;
    const meta = await files.readMeta(dir, this.now());
    const owner = meta ?? files.fenceRemnant(dir, this.now());
    if (owner && owner.tenantId !== scope.tenantId) throw rules.sessionNotFound();
    const taskFile = files.childPath(dir, `${opts.execution.taskKey}.json`);
    const text = meta ? await files.readText(taskFile) : null;
    rules.checkExecution(
      text === null ? null : files.parseStored(text, taskFile),
      opts.execution.agentSessionId,
    );
  }

  // Validates every id before any path is built; then each path is checked to stay inside base.
  private locate(scope: StoreScope, sessionId: string, key?: string, opts: AppendOptions = {}) {
    rules.assertTarget(scope, sessionId, key);
    rules.assertWriteOptions(opts);
    if (key === files.META_KEY) {
      throw new LoomError(
        LoomErrorCode.INVALID_ID,
        `state key ${key} is reserved by the file store`,
      );
    }
    const dir = files.childPath(this.base, sessionId);
    const name = key ?? files.META_KEY;
    return {
      dir,
      value: files.childPath(dir, `${name}.json`),
      list: files.childPath(dir, `${name}.jsonl`),
    };
  }
}
