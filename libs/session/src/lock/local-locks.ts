import { performance } from 'perf_hooks';

/**
 * The conversation locks of a process without Redis (the embedded profile: one process, so a
 * lock in its memory excludes every other holder). Each lapses `ttlMs` after it was taken or
 * last renewed, as its Redis twin does, so a holder that never lets go does not keep the
 * conversation for good (timed on the monotonic clock); one entry per lock held.
 */
const held = new Map<string, { token: string; until: number }>();

function holderOf(key: string): string | null {
  const lock = held.get(key);
  if (lock && lock.until <= performance.now()) held.delete(key);
  return held.get(key)?.token ?? null;
}

/** SET NX PX: takes the lock when no one holds it. */
export function takeLocal(key: string, token: string, ttlMs: number): boolean {
  if (holderOf(key) !== null) return false;
  held.set(key, { token, until: performance.now() + ttlMs });
  return true;
}

/** Takes the lock when it is free or held by exactly `stale` (a holder known to be dead). */
export function takeOverLocal(key: string, stale: string, token: string, ttlMs: number): boolean {
  const holder = holderOf(key);
  if (holder !== null && holder !== stale) return false;
  held.set(key, { token, until: performance.now() + ttlMs });
  return true;
}

/** The holder's token, or null. */
export function localHolder(key: string): string | null {
  return holderOf(key);
}

/** 1 when `token` still holds the lock (renewed), else 0. */
export function renewLocal(key: string, token: string, ttlMs: number): number {
  if (holderOf(key) !== token) return 0;
  held.set(key, { token, until: performance.now() + ttlMs });
  return 1;
}

/** Lets go of the lock if `token` holds it. */
export function releaseLocal(key: string, token: string): void {
  if (holderOf(key) === token) held.delete(key);
}
