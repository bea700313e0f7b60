import type { LoomEnv } from './loom-env';

/** The largest page of GET …/messages: a tenant's or a user's share always holds one. */
export const LARGEST_MESSAGE_PAGE = 200;

/** The turns one tenant may hold at once (LOOM_MAX_TURNS_PER_TENANT, by default half the bound). */
export function turnsPerTenant(env: LoomEnv): number {
  return env.LOOM_MAX_TURNS_PER_TENANT ?? Math.ceil(env.LOOM_MAX_TURNS_IN_FLIGHT / 2);
}

/** The turns one user of a tenant may hold at once (LOOM_MAX_TURNS_PER_USER, by default half). */
export function turnsPerUser(env: LoomEnv): number {
  return env.LOOM_MAX_TURNS_PER_USER ?? Math.ceil(turnsPerTenant(env) / 2);
}

/** The messages one tenant's pages may hold at once (LOOM_MAX_MESSAGES_READ_PER_TENANT). */
export function messagesReadPerTenant(env: LoomEnv): number {
  return (
    env.LOOM_MAX_MESSAGES_READ_PER_TENANT ??
    Math.max(LARGEST_MESSAGE_PAGE, Math.ceil(env.LOOM_MAX_MESSAGES_READ_IN_FLIGHT / 2))
  );
}

/** The messages one user's pages may hold at once (LOOM_MAX_MESSAGES_READ_PER_USER). */
export function messagesReadPerUser(env: LoomEnv): number {
  return (
    env.LOOM_MAX_MESSAGES_READ_PER_USER ??
    Math.max(LARGEST_MESSAGE_PAGE, Math.ceil(messagesReadPerTenant(env) / 2))
  );
}
