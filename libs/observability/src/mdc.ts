import { ClsServiceManager } from 'nestjs-cls';
import { LoomClsStore, MDC_FIELDS, MdcField } from './cls-store';

/**
 * What an MDC value may look like: ids, agent types, correlation ids, and every tenant id a token
 * may carry (libs/session PRINCIPAL_PATTERN: `auth0|…`, `a+b`). Anything else is dropped.
 */
export const MDC_VALUE = /^[A-Za-z0-9_.:@|+-]{1,128}$/;

/** The MDC fields of `source` that are safe to log (strings of the allowed shape), e.g. a dispatch's `meta`. */
export function pickMdc(source: unknown): Partial<Record<MdcField, string>> {
  const out: Partial<Record<MdcField, string>> = {};
  if (!source || typeof source !== 'object') return out;
  for (const f of MDC_FIELDS) {
    const v = (source as Record<string, unknown>)[f];
    if (typeof v === 'string' && MDC_VALUE.test(v)) out[f] = v;
  }
  return out;
}

/**
 * Runs `fn` in a CLS context of its own holding `fields` (what a cron job, a recovery pass or a
 * startup step knows), so every line it logs carries them (DESIGN.md §8: cron jobs run inside
 * cls.run()). Inherits the current context's fields when there is one.
 */
export function runWithMdc<T>(fields: Partial<LoomClsStore>, fn: () => T): T {
  const cls = ClsServiceManager.getClsService<LoomClsStore>();
  return cls.run(() => {
    for (const [k, v] of Object.entries(fields))
      if (v !== undefined) cls.set(k as keyof LoomClsStore, v as never);
    return fn();
  });
}

/**
 * Runs `fn` outside any CLS context: what it starts that outlives the caller's work (a shared
 * connection, its socket's events, a loop) logs with no request's fields, rather than with those
 * of whichever request happened to start it first.
 */
export function outsideMdc<T>(fn: () => T): T {
  return ClsServiceManager.getClsService<LoomClsStore>().exit(fn);
}
