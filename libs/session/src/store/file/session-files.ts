import { randomBytes } from 'crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat } from 'fs/promises';
import { Logger } from '@nestjs/common';
import { basename, dirname, resolve } from 'path';
import { damagedData, isDamagedData, LoomError, LoomErrorCode } from '../../errors/session-error';
import { isValidId } from '../../ids';
import { checkFence, sessionNotFound } from '../memory/store-rules';

/** `_meta.json` of a session: owner, fencing counter, updatedAt/userId per value, list keys. */
export interface SessionMeta {
  tenantId: string;
  fence: number;
  /** Only in files of earlier versions, which kept a fence alone on disk: ms it lapses. */
  fenceExpiresAt?: number;
  values: Map<string, { updatedAt: Date; userId: string | null }>;
  lists: Set<string>;
}

interface StoredMeta {
  tenantId: string;
  fence: number;
  fenceExpiresAt?: number;
  values: Record<string, { updatedAt: string; userId: string | null }>;
  lists: string[];
}

/** The meta file's name; a state key of this name would overwrite it, so it is reserved. */
export const META_KEY = '_meta';

const isMissing = (err: unknown): boolean => (err as NodeJS.ErrnoException)?.code === 'ENOENT';

/**
 * `parent/name`, after checking that it resolves to a direct child of `parent`. The names are
 * validated ids and keys already; this is defence in depth against a future pattern change.
 */
export function childPath(parent: string, name: string): string {
  const path = resolve(parent, name);
  if (dirname(path) !== parent) {
    throw new LoomError(LoomErrorCode.INVALID_ID, 'path escapes its directory');
  }
  return path;
}

/** Reads a file as UTF-8, or null when it does not exist. */
export async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if (isMissing(err)) return null;
    throw err;
  }
}

export async function fileExists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if (isMissing(err)) return false;
    throw err;
  }
}

/** What a file system answers when it takes no more writes: full, over quota or a size limit, read-only. */
const NO_WRITES = new Set(['ENOSPC', 'EDQUOT', 'EFBIG', 'EROFS']);

/**
 * `err`, or UNAVAILABLE (503) when it says the data directory takes no writes for now (a full
 * disk, say): as MySQL's full or read-only server is, since a retry succeeds once it takes writes
 * again. A list line cut short by it is cut off before the next append.
 */
export function noWritesAsUnavailable(err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (typeof code !== 'string' || !NO_WRITES.has(code)) return err;
  return new LoomError(
    LoomErrorCode.UNAVAILABLE,
    `the data directory takes no writes for now (${code}): the write did not complete`,
  );
}

/** Name prefix of a session directory being removed (never a valid id: it holds a dot). */
const REMOVING = '.removing-';

/**
 * Removes the session directory `dir` under `base` whole: renamed away first (one step), so no
 * half session stays under its id should the process die midway; then deleted, with any that an
 * earlier deletion cut off left behind.
 */
export async function removeSessionDir(base: string, dir: string): Promise<void> {
  const doomed = childPath(base, `${REMOVING}${randomBytes(6).toString('hex')}`);
  try {
    await rename(dir, doomed);
    await syncDir(base); // a deleted session must not come back after a crash
  } catch (err) {
    if (!isMissing(err)) throw err;
  }
  const left = (await readdir(base)).filter((name) => name.startsWith(REMOVING));
  await Promise.all(
    left.map((name) => rm(childPath(base, name), { recursive: true, force: true })),
  );
}

/**
 * Makes what changed in directory `dir` (a file created, renamed in or away) durable: a file's own
 * sync does not cover its entry in the directory, which a power loss or OS crash could lose.
 */
export async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Replaces a file atomically and durably: a synced temporary file in the same directory, then a
 * rename, then the directory synced (the rename is durable only then).
 */
export async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const file = await open(tmp, 'wx', 0o600);
    try {
      await file.writeFile(text, 'utf8');
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await syncDir(dirname(path));
}

const log = new Logger('FileSessionStore');

/**
 * The value stored as `text` in `path`; a file that is not JSON (damaged on disk, or edited by
 * hand) is INTERNAL naming it (`<sessionId>/<file>`, in `details.damaged` and the log), not a
 * SyntaxError that says nothing of where.
 */
export function parseStored<T>(text: string, path: string): T {
  try {
    return JSON.parse(text) as T;
  } catch (err) {
    throw damagedFile(path, '(not JSON)', err instanceof Error ? err.message : String(err));
  }
}

/**
 * The error for the damaged file `path` (`what`: where in it, and how), logged with its full path
 * and `why`; the error names it as `<sessionId>/<file> <what>`.
 */
export function damagedFile(path: string, what: string, why: string): LoomError {
  log.error(`damaged data file ${path}: ${why}; restore it from a backup or remove it`);
  return damagedData(`${basename(dirname(path))}/${basename(path)} ${what}`);
}

/** The owner of a session whose meta is damaged: no tenant (every tenant id is non-empty). */
const NOBODY = '';

/**
 * The session's meta, or null when it has none or held nothing but a fence that lapsed before
 * `now` (ms): such a session is gone, and its directory is taken as new by the next write.
 *
 * A meta that cannot be read (damaged on disk, edited by hand) is logged with its path and read
 * as owned by nobody: the session is then to every tenant what another tenant's session is
 * (absent to reads, NOT_FOUND to writes, left alone by a deletion), so the answers name it to
 * none, and nothing is written over it; an operator restores the file.
 */
export async function readMeta(dir: string, now = Date.now()): Promise<SessionMeta | null> {
  const path = childPath(dir, `${META_KEY}.json`);
  const text = await readText(path);
  if (text === null) return null;
  let raw: StoredMeta;
  try {
    raw = parseStored<StoredMeta>(text, path);
    if (!isStoredMeta(raw)) throw damagedFile(path, '(not a meta)', 'not a session meta');
  } catch (err) {
    if (!isDamagedData(err)) throw err;
    return { tenantId: NOBODY, fence: 0, values: new Map(), lists: new Set() };
  }
  if (raw.fenceExpiresAt !== undefined && raw.fenceExpiresAt <= now) return null;
  const values = Object.entries(raw.values).map(
    ([key, v]) => [key, { updatedAt: new Date(v.updatedAt), userId: v.userId }] as const,
  );
  return {
    tenantId: raw.tenantId,
    fence: raw.fence,
    fenceExpiresAt: raw.fenceExpiresAt,
    values: new Map(values),
    lists: new Set(raw.lists),
  };
}

function isStoredMeta(raw: unknown): raw is StoredMeta {
  const meta = raw as StoredMeta | null;
  return (
    typeof meta?.tenantId === 'string' &&
    meta.tenantId !== NOBODY &&
    Number.isSafeInteger(meta.fence) &&
    typeof meta.values === 'object' &&
    meta.values !== null &&
    Array.isArray(meta.lists)
  );
}

export async function writeMeta(dir: string, meta: SessionMeta): Promise<void> {
  // A directory made here (the session's, and the data directory itself at the first write) is
  // durable once its parent is synced.
  const made = await mkdir(dir, { recursive: true, mode: 0o700 });
  if (made !== undefined) {
    await syncDir(dirname(dir));
    if (made !== dir) await syncDir(dirname(made));
  }
  const values = Object.fromEntries(
    [...meta.values].map(([key, v]) => [
      key,
      { updatedAt: v.updatedAt.toISOString(), userId: v.userId },
    ]),
  );
  const stored: StoredMeta = {
    tenantId: meta.tenantId,
    fence: meta.fence,
    ...(meta.fenceExpiresAt !== undefined ? { fenceExpiresAt: meta.fenceExpiresAt } : {}),
    values,
    lists: [...meta.lists],
  };
  await writeAtomic(childPath(dir, `${META_KEY}.json`), JSON.stringify(stored));
}

/** The meta of the session in `dir` if `tenantId` owns it, else null. */
export async function ownedMeta(
  tenantId: string,
  dir: string,
  now = Date.now(),
): Promise<SessionMeta | null> {
  const meta = await readMeta(dir, now);
  return meta?.tenantId === tenantId ? meta : null;
}

/**
 * The owner and fencing counter of a session that holds nothing else (deleted, or only locked),
 * by session directory: kept in this process's memory, never on disk, so a deleted session leaves
 * no file behind. A fence orders the holders of ONE process (the file store's only user), and none
 * outlives it, so what a restart forgets protected nobody. Each lapses ORPHAN_FENCE_MS after the
 * deletion or its last issue, unless the session is written again (the counter then goes on disk).
 */
export interface FenceRemnant {
  tenantId: string;
  fence: number;
  expiresAt: number;
}

const remnants = new Map<string, FenceRemnant>();
let remnantsSetSincePrune = 0;

/** The live remnant of the session in `dir`, or null (a lapsed one is forgotten). */
export function fenceRemnant(dir: string, now = Date.now()): FenceRemnant | null {
  const remnant = remnants.get(dir);
  if (remnant && remnant.expiresAt <= now) {
    remnants.delete(dir);
    return null;
  }
  return remnant ?? null;
}

/** Keeps the counter of the session in `dir` in memory alone (see FenceRemnant). */
export function keepFenceRemnant(dir: string, remnant: FenceRemnant, now = Date.now()): void {
  remnants.set(dir, remnant);
  // Lapsed remnants of ids never used again go too, now and then (the map stays small).
  if (++remnantsSetSincePrune >= 256) {
    remnantsSetSincePrune = 0;
    for (const [key, r] of remnants) if (r.expiresAt <= now) remnants.delete(key);
  }
}

export function forgetFenceRemnant(dir: string): void {
  remnants.delete(dir);
}

/**
 * The owner and counter of the session in `dir` wherever they are (its meta on disk, else its
 * remnant in memory), or null when it has neither.
 */
export async function readOwner(
  dir: string,
  now = Date.now(),
): Promise<{ tenantId: string; fence: number } | null> {
  return (await readMeta(dir, now)) ?? fenceRemnant(dir, now);
}

/**
 * Checks owner (NOT_FOUND) and fence (STALE_FENCING_TOKEN) of a write and returns the meta; a new
 * session is created first, owned by `tenantId` (its counter taken over from its remnant in
 * memory, if any). Only under the session's write chain. The meta returned no longer lapses (the
 * caller writes it back with what it adds).
 */
export async function claimMeta(
  tenantId: string,
  dir: string,
  fence?: number,
  now = Date.now(),
): Promise<SessionMeta> {
  const meta = await readMeta(dir, now);
  const owner = meta ?? fenceRemnant(dir, now);
  if (owner && owner.tenantId !== tenantId) throw sessionNotFound();
  checkFence(owner?.fence ?? 0, fence);
  if (meta) return { ...meta, fenceExpiresAt: undefined };
  const fresh: SessionMeta = {
    tenantId,
    fence: owner?.fence ?? 0,
    values: new Map(),
    lists: new Set(),
  };
  await writeMeta(dir, fresh);
  forgetFenceRemnant(dir);
  return fresh;
}

/** How many session metas a listing reads at once (far below a process's open-file limit). */
export const LIST_READ_CONCURRENCY = 16;

/** The metas of every session directory under `base` (unreadable ones skipped); `read`: tests. */
export async function readAllMetas(
  base: string,
  read: (dir: string) => Promise<SessionMeta | null> = (dir) => readMeta(dir),
): Promise<Array<{ sessionId: string; meta: SessionMeta }>> {
  const entries = await readdir(base, { withFileTypes: true }).catch(
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [];
      throw err;
    },
  );
  const ids = entries.filter((e) => e.isDirectory() && isValidId(e.name)).map((e) => e.name);
  // A few readers at a time, not one open file per session at once (EMFILE past ~1,000).
  const metas: Array<SessionMeta | null> = new Array(ids.length).fill(null);
  let next = 0;
  const reader = async (): Promise<void> => {
    while (next < ids.length) {
      const i = next++;
      metas[i] = await read(childPath(base, ids[i])).catch(() => null);
    }
  };
  await Promise.all(Array.from({ length: Math.min(LIST_READ_CONCURRENCY, ids.length) }, reader));
  return ids.flatMap((sessionId, i) => {
    const meta = metas[i];
    return meta ? [{ sessionId, meta }] : [];
  });
}
