import type { RedisOptions } from 'ioredis';
import { DataSource } from 'typeorm';
import { DEFAULT_SESSION_OPTIONS, SessionOptions, ttlRules } from './config/session-options';
import { checkDeploymentDatabase } from './deployment-database';
import { FileSessionStore } from './store/file/file-session.store';
import { lockDataDir } from './store/file/data-dir-lock';
import { openSessionDataSource, START_TIMEOUT_MS } from './store/mysql/data-source';
import { isUnreachable } from './store/mysql/mysql-errors';
import { mysqlConnectionConfig } from './store/mysql/mysql-connection';
import { MysqlSessionStore } from './store/mysql/mysql-session.store';
import { RedisKeys } from './store/redis/redis-keys';
import { RedisSessionStore } from './store/redis/redis-session.store';
import { SessionStore } from './store/session-store';
import { TieredSessionStore } from './store/tiered/tiered-session.store';
import { SYSTEM_TENANT, SystemSessions } from './conversation/system.repository';
import { LoomError, LoomErrorCode } from './errors/session-error';
import { masters, openRedis, RedisClient, RedisTarget } from './redis/redis-client';

const fileStores = new Map<string, FileSessionStore>();

export interface SessionInfra {
  store: SessionStore;
  /** Null in the embedded profile. */
  redis: RedisClient | null;
  dataSource: DataSource | null;
  keys: RedisKeys;
  close(): Promise<void>;
}

/** A Redis connection for the hot tier and locks: fails fast while Redis is away, reconnects by itself. */
export function createRedis(target: RedisTarget | string, name: string): RedisClient {
  const options: RedisOptions = {
    connectionName: name,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: 2000,
    // Nothing back for as long while a command waits: the socket is dropped and opened again.
    // A Redis host gone without a reset otherwise kept this connection (every command timing
    // out) until the kernel's retransmission time-out, about 15 minutes.
    socketTimeout: 2000,
    // A command left unanswered by a dropped connection has failed (or will, at its time-out):
    // its caller was told. Sent again on the new one it ran behind the caller's back (a lock or
    // claim taken, a turn appended, a counter bumped), or twice when the first had run.
    autoResendUnfulfilledCommands: false,
    retryStrategy: (times) => Math.min(times * 100, 2000),
  };
  return openRedis(typeof target === 'string' ? { url: target } : target, options);
}

/**
 * Builds the store of the configured profile: tiered (LRU → Redis → MySQL) or JSON files.
 * Options left out take DEFAULT_SESSION_OPTIONS.
 */
export async function createSessionInfra(
  options: Partial<SessionOptions> = {},
  onHotError?: (err: unknown) => void,
): Promise<SessionInfra> {
  const opts: SessionOptions = { ...DEFAULT_SESSION_OPTIONS, ...options };
  const keys = new RedisKeys(opts.keyPrefix);
  if (opts.profile === 'embedded') {
    // Every app of the embedded profile runs in one process and must share one file store; no
    // other process may use its directory meanwhile.
    lockDataDir(opts.dataDir);
    const store = fileStores.get(opts.dataDir) ?? new FileSessionStore(opts.dataDir);
    fileStores.set(opts.dataDir, store);
    return { store, redis: null, dataSource: null, keys, close: async () => undefined };
  }
  const startTimeoutMs = opts.mysqlStartTimeoutMs ?? START_TIMEOUT_MS;
  const until = Date.now() + startTimeoutMs;
  const { dataSource, durable } = await whileUnreachable(until, async () => {
    const source = await openSessionDataSource({
      url: opts.mysqlUrl,
      sslCaFile: opts.mysqlSslCa,
      migrationsRun: opts.migrationsRun,
      poolSize: opts.mysqlPoolSize,
      startTimeoutMs,
    });
    const store = new MysqlSessionStore(source, { queryTimeoutMs: opts.mysqlQueryTimeoutMs });
    try {
      await claimDatabase(store, opts.keyPrefix, opts.databaseClaim);
    } catch (err) {
      // Not awaited: a statement that timed out may still hold its connection (a lock wait).
      void source.destroy().catch(() => undefined);
      throw err;
    }
    return { dataSource: source, durable: store };
  });
  const redis = createRedis(
    { url: opts.redisUrl, clusterNodes: opts.redisClusterNodes, natMap: opts.redisClusterNatMap },
    'loom-session',
  );
  redis.on('error', (err) => onHotError?.(err));
  try {
    await connected(redis, 3000);
  } catch (err) {
    redis.disconnect();
    void dataSource.destroy().catch(() => undefined);
    throw err;
  }
  const tooOld = redis.status === 'ready' ? await oldestRedisProblem(redis) : null;
  if (tooOld) {
    redis.disconnect();
    void dataSource.destroy().catch(() => undefined);
    throw new Error(tooOld);
  }
  try {
    const { host, port, database } = mysqlConnectionConfig(opts.mysqlUrl, opts.mysqlSslCa);
    await whileUnreachable(until, () =>
      checkDeploymentDatabase(
        durable,
        redis,
        opts.keyPrefix,
        { host, port, database },
        opts.databaseClaim ?? 'claim',
      ),
    );
  } catch (err) {
    redis.disconnect();
    void dataSource.destroy().catch(() => undefined);
    throw err;
  }
  const store = new TieredSessionStore(
    durable,
    new RedisSessionStore(redis, opts.keyPrefix, { authoritative: false, ownsConnection: false }),
    {
      ttlFor: ttlRules(opts.ttl),
      lruMax: opts.lruMax,
      lruTtlMs: opts.lruTtlMs,
      guard: { callTimeoutMs: opts.redisCallTimeoutMs, failureThreshold: 3, halfOpenAfterMs: 2000 },
      // A write's deadline outlasts the longest MySQL statement it may wait for.
      writeDeadlineMs: Math.max(15_000, (opts.mysqlQueryTimeoutMs ?? 10_000) + 5_000),
      onHotError,
    },
  );
  return {
    store,
    redis,
    dataSource,
    keys,
    close: async () => {
      await store.close();
      redis.disconnect();
    },
  };
}

/**
 * `step` again every 500 ms while it fails because MySQL cannot be reached, until `until` (ms):
 * the start's first connection waits for a MySQL that is down (see openSessionDataSource), but
 * one that goes down right after it (killed, restarting, failing over) failed a later step, and
 * an app started beside it exited where it would have started a moment later. Any other failure
 * (a claim that is not this deployment's, a lock held, a stalled server) is the caller's at once.
 */
async function whileUnreachable<T>(until: number, step: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await step();
    } catch (err) {
      if (!isUnreachable(err) || Date.now() >= until) throw err;
      await new Promise((resolve) => setTimeout(resolve, Math.min(500, until - Date.now())));
    }
  }
}

/**
 * Why the Redis whose `INFO server` this is cannot serve Loom, or null. Its scripts use PEXPIRE
 * NX/GT (Redis 7.0); an older server would refuse every hot write, and the breaker would hide
 * that by running on MySQL alone. Checked once at start, when Redis answers.
 */
export function redisVersionProblem(info: string): string | null {
  const version = /^redis_version:(\d+)\.(\d+)/m.exec(info);
  if (!version || Number(version[1]) >= 7) return null;
  return `the Redis at REDIS_URL is version ${version[1]}.${version[2]}: Loom needs Redis 7.0 or later`;
}

/** The version problem of any master (INFO answers for one node only). */
async function oldestRedisProblem(redis: RedisClient): Promise<string | null> {
  const infos = await Promise.all(masters(redis).map((m) => m.info('server').catch(() => '')));
  return infos.map(redisVersionProblem).find((problem) => problem !== null) ?? null;
}

/**
 * What a Redis server answers to a connection whose REDIS_URL it will never take: no password
 * where it requires one, a wrong one, a user without the rights, a database number it does not
 * have. Retrying cannot help, unlike a server that is down.
 */
const REFUSED_CONFIGURATION =
  /^(NOAUTH|WRONGPASS|NOPERM)\b|^ERR (DB index is out of range|invalid DB index|invalid password)/;

/**
 * Waits (bounded) until the connection is ready, so an app does not start by failing its first
 * Redis calls; if Redis is down the app starts anyway and the breaker sends calls to MySQL. A
 * server that refuses REDIS_URL itself (see REFUSED_CONFIGURATION) fails the start instead: the
 * app would otherwise run without Redis for good (or, for a database number, on database 0).
 */
async function connected(redis: RedisClient, timeoutMs: number): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const ready = () => settle();
    const settle = (err?: Error) => {
      clearTimeout(timer);
      redis.off('ready', ready);
      redis.off('error', refused);
      if (err) reject(err);
      else resolve();
    };
    const refused = (err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      if (REFUSED_CONFIGURATION.test(message))
        settle(new Error(`the Redis at REDIS_URL refused the connection: ${message}`));
    };
    const timer = setTimeout(ready, timeoutMs);
    redis.once('ready', ready);
    redis.on('error', refused);
  });
}

/**
 * A database belongs to one deployment, named by its key prefix: the first app to start claims
 * it. Two deployments with different prefixes on one database would read each other's
 * conversations (tenants are only unique within a deployment) and plan each other's agents, so
 * the second is refused at start instead. `check` (operator tools) refuses the same way but
 * never claims: a tool run with the wrong prefix must not lock the deployment out. Without the
 * session table yet (DB_MIGRATIONS_RUN=false) there is nothing to claim: the app starts (its
 * /health says 503 until the migrations run) and a later start claims.
 */
export async function claimDatabase(
  durable: MysqlSessionStore,
  keyPrefix: string,
  mode: 'claim' | 'check' = 'claim',
): Promise<void> {
  const scope = { tenantId: SYSTEM_TENANT };
  let owner: string | null;
  try {
    if (
      mode === 'claim' &&
      (await durable.create(scope, SystemSessions.deployment, 'keyPrefix', keyPrefix))
    )
      return;
    owner = await durable.get<string>(scope, SystemSessions.deployment, 'keyPrefix');
  } catch (err) {
    // Not migrated yet (DB_MIGRATIONS_RUN=false): nothing to claim. Anything else (MySQL away,
    // busy) fails the start, as an unclaimed start would let a wrong prefix in.
    if (LoomError.is(err, LoomErrorCode.UNAVAILABLE) && err.details?.schemaMissing) return;
    throw err;
  }
  if (owner !== null && owner !== keyPrefix)
    throw new Error(
      `the database of MYSQL_URL belongs to the deployment with LOOM_KEY_PREFIX=${JSON.stringify(owner)}, ` +
        `not ${JSON.stringify(keyPrefix)}: give each deployment its own database (docs/configuration.md)`,
    );
}
