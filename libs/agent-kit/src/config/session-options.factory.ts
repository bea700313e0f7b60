import { DEFAULT_SESSION_OPTIONS, SharedAclRules, SessionOptions } from '@loom/session';
import { redactDeep } from '@loom/security';
import { LoomEnv } from './loom-env';

/** The session library's options from an app's validated environment. */
export function sessionOptionsFrom(env: LoomEnv): SessionOptions & {
  acl: SharedAclRules;
  redactShared?: (value: unknown) => unknown;
} {
  return {
    ...DEFAULT_SESSION_OPTIONS,
    profile: env.LOOM_PROFILE,
    mysqlUrl: env.MYSQL_URL,
    mysqlSslCa: env.MYSQL_SSL_CA,
    redisUrl: env.REDIS_URL,
    redisClusterNodes: env.redisClusterNodes,
    redisClusterNatMap: env.redisClusterNatMap,
    keyPrefix: env.LOOM_KEY_PREFIX,
    migrationsRun: env.DB_MIGRATIONS_RUN,
    mysqlPoolSize: env.DB_POOL_SIZE,
    mysqlQueryTimeoutMs: env.DB_QUERY_TIMEOUT_MS,
    mysqlStartTimeoutMs: env.DB_START_TIMEOUT_MS,
    dataDir: env.LOOM_DATA_DIR,
    acl: env.sharedAcl,
    redactShared: env.LOOM_REDACT_STORED
      ? (value) => redactDeep(asStored(value), { maxDepth: 32 })
      : undefined,
  };
}

/**
 * `value` as its JSON holds it, as it will be stored: plain objects, arrays and texts (`toJSON`
 * applied). redactDeep walks plain objects only and keeps a class instance as it is, so an
 * instance of a handler's own class would otherwise be stored with its PII. A value JSON cannot
 * hold is refused before (VALIDATION_FAILED): given as it is.
 */
function asStored(value: unknown): unknown {
  try {
    const json = JSON.stringify(value);
    return json === undefined ? undefined : JSON.parse(json);
  } catch {
    return value;
  }
}

export const LOOM_ENV = Symbol('LOOM_ENV');
