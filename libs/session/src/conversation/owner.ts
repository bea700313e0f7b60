import type { SessionStore, StoreScope } from '../store/session-store';

/** Who a request acts for: the tenant and user from the verified token (or a signed assignment). */
export interface Owner {
  tenantId: string;
  userId: string;
}

/**
 * A store's read with the tiered store's extras: `consistent` (MySQL, not a cached copy) and
 * `owned` (a value that is not the caller's answers null, after the tiers a missing one costs).
 * Other stores take neither, so a caller checks the owner of what it gets in any case.
 */
export type OwnerCheckingStore = SessionStore & {
  get<T>(
    scope: StoreScope,
    sid: string,
    key: string,
    consistent?: boolean,
    owned?: (value: T) => boolean,
  ): Promise<T | null>;
};
