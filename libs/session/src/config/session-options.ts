import type { ClusterNatMap } from '../redis/cluster-nat-map';
import { TtlRule } from '../store/tiered/tiered-session.store';
import { layerOf, StateKeys } from '../model/state-keys';

/** Everything the session library needs, taken from each app's validated config. */
export interface SessionOptions {
  /** 'distributed': MySQL + Redis (tiered); 'embedded': the JSON-file store alone (no hot tier). */
  profile: 'distributed' | 'embedded';
  mysqlUrl: string;
  /** MYSQL_SSL_CA: a PEM file of the CA that signed the MySQL server's certificate. */
  mysqlSslCa?: string;
  redisUrl: string;
  /** REDIS_CLUSTER_NODES: seeds of a Redis Cluster (credentials and TLS from `redisUrl`). */
  redisClusterNodes?: string[];
  /** REDIS_CLUSTER_NAT_MAP: where the cluster's announced nodes are reached (behind NAT). */
  redisClusterNatMap?: ClusterNatMap;
  keyPrefix: string;
  migrationsRun: boolean;
  /** MySQL connections per process (default 10). */
  mysqlPoolSize?: number;
  /** A statement MySQL has not answered in this long is UNAVAILABLE (default 10 s). */
  mysqlQueryTimeoutMs?: number;
  /** A start step MySQL leaves waiting this long fails the start (DB_START_TIMEOUT_MS, 60 s). */
  mysqlStartTimeoutMs?: number;
  /** Directory of the JSON-file store (embedded profile). */
  dataDir: string;
  ttl: { conversationSeconds: number; taskSeconds: number; agentSeconds: number };
  /** A conversation idle this long is removed from the durable store by the sweeper. */
  idleExpiryDays: number;
  lockTtlMs: number;
  lockWaitMs: number;
  lruMax: number;
  lruTtlMs: number;
  redisCallTimeoutMs: number;
  /**
   * `claim` (apps): the first to start claims the database for its key prefix; `check`
   * (operator tools): refused on another prefix's database, but never claims one.
   */
  databaseClaim?: 'claim' | 'check';
}

export const SESSION_OPTIONS = Symbol('SESSION_OPTIONS');

export const DEFAULT_TTL = {
  conversationSeconds: 7 * 86400,
  taskSeconds: 86400,
  agentSeconds: 3600,
};

/** What every option is unless the app says otherwise (API.md's defaults, seed 000's TTLs). */
export const DEFAULT_SESSION_OPTIONS: SessionOptions = {
  profile: 'distributed',
  mysqlUrl: 'mysql://root@127.0.0.1:3306/loom',
  redisUrl: 'redis://127.0.0.1:6379',
  keyPrefix: 'loom:',
  migrationsRun: true,
  dataDir: '.loom-data',
  ttl: DEFAULT_TTL,
  idleExpiryDays: 30,
  lockTtlMs: 30_000,
  lockWaitMs: 10_000,
  lruMax: 10_000,
  lruTtlMs: 1000,
  redisCallTimeoutMs: 250,
};

/** Seed 000's layered TTLs: the conversation slides on read, tasks and agents do not. */
export function ttlRules(ttl: SessionOptions['ttl']): (stateKey: string) => TtlRule {
  return (stateKey) => {
    // Read with the messages after its range: a stale copy would hide the messages between.
    if (stateKey === StateKeys.summary)
      return { ttlSeconds: ttl.conversationSeconds, sliding: true, lru: false };
    switch (layerOf(stateKey)) {
      case 'agent':
        return { ttlSeconds: ttl.agentSeconds, sliding: false };
      case 'task':
        return { ttlSeconds: ttl.taskSeconds, sliding: false };
      default:
        return { ttlSeconds: ttl.conversationSeconds, sliding: true };
    }
  };
}
