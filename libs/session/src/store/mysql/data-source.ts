import { createHash } from 'crypto';
import * as mysql2 from 'mysql2';
import { Connection, createConnection, RowDataPacket } from 'mysql2/promise';
import { DataSource, MigrationExecutor, QueryRunner } from 'typeorm';
import { SESSION_MIGRATIONS } from '../../migrations';
import { isContentionError } from './mysql-errors';
import { LOOM_TIME_ZONE, MysqlConnectionConfig, mysqlConnectionConfig } from './mysql-connection';
import { SessionStateEntity } from './session-state.entity';

export interface MysqlOptions {
  url: string;
  poolSize?: number;
  /** Apply pending migrations on start (API.md: DB_MIGRATIONS_RUN). */
  migrationsRun?: boolean;
  connectTimeoutMs?: number;
  /**
   * DB_START_TIMEOUT_MS: how long MySQL may leave a start step waiting (connecting and creating
   * the database, opening the pool, each statement around the migration lock, a migration's wait
   * for a table) before the start fails naming it (default 60 s). A migration the server works
   * on, and the wait for another process migrating, last as long as they take.
   */
  startTimeoutMs?: number;
  /** MYSQL_SSL_CA: a PEM file of the CA that signed the server's certificate. */
  sslCaFile?: string;
}

/** DB_START_TIMEOUT_MS's default. */
export const START_TIMEOUT_MS = 60_000;

/** DB_START_TIMEOUT_MS of an operator command's environment (the apps validate theirs). */
export function startTimeoutMs(value: string | undefined): number {
  if (!value) return START_TIMEOUT_MS;
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms < 1000 || ms > 86_400_000)
    throw new Error('DB_START_TIMEOUT_MS must be a whole number of ms from 1000 to 86400000');
  return ms;
}

/**
 * `work`, or a rejection once it has waited `ms`: a MySQL that accepted the connection and then
 * stalled, or a lock another session holds, would otherwise keep the start waiting for good.
 * `abandon` closes what `work` waits on, so nothing is left hanging behind the failed start.
 */
async function startStep<T>(
  config: MysqlConnectionConfig,
  ms: number,
  step: string,
  work: Promise<T>,
  abandon: () => void,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  work.catch(() => undefined);
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      abandon();
      reject(startTimedOut(config, ms, step));
    }, ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

function startTimedOut(config: MysqlConnectionConfig, ms: number, step: string): Error {
  return new Error(
    `MySQL at ${config.host}:${config.port} did not answer within ${ms} ms (DB_START_TIMEOUT_MS) ` +
      `while ${step}: a server that stopped answering, or a lock another session holds`,
  );
}

/** The mysql2 connection a query runner took from the pool, closed at once (no COM_QUIT). */
function destroyRunner(runner: QueryRunner): void {
  const conn = (
    runner as unknown as {
      databaseConnection?: { destroy(): void; stream?: { destroy(): void } };
    }
  ).databaseConnection;
  conn?.destroy();
  conn?.stream?.destroy();
}

/**
 * mysql2 whose pools pin every new connection's session time zone to UTC before handing it out
 * (the `connection` event comes before the first query is queued): NOW() and CURRENT_TIMESTAMP
 * then agree with the times the driver writes, whatever the server's default zone. `start`
 * collects the connections opened while the pool starts, for a start that gives up to close
 * them; once it is over (`start.opened` null) nothing is kept: the pool replaces the connections
 * it loses (a restart, a failover, wait_timeout) for as long as the process runs, and each one
 * kept would stay in memory for good.
 */
function utcMysql2(start: { opened: Set<mysql2.PoolConnection> | null }) {
  return {
    ...mysql2,
    createPool: (config: mysql2.PoolOptions) =>
      mysql2.createPool(config).on('connection', (conn) => {
        if (start.opened && start.opened.size < 1000) start.opened.add(conn);
        conn.query(`SET time_zone = '${LOOM_TIME_ZONE}'`, () => undefined);
      }),
  };
}

/**
 * Creates the database named by `url` when it is missing (apps may start on an empty server);
 * one that exists is left alone, so a user without the CREATE privilege can start.
 * The first connection a process opens, so a TLS setting the server does not meet fails here,
 * saying so. In UTC like every other connection, though it reads and writes no time.
 */
export async function ensureDatabase(
  config: MysqlConnectionConfig,
  startTimeoutMs = START_TIMEOUT_MS,
): Promise<void> {
  const { database, ...server } = config;
  const connectTimeout = Math.min(5000, startTimeoutMs);
  const conn = await connectWhileRefused(config, startTimeoutMs, () =>
    createConnection({ ...server, connectTimeout, timezone: 'Z' }),
  ).catch((err) => {
    throw tlsError(config, err) ?? unanswered(config, connectTimeout, err);
  });
  await startStep(config, startTimeoutMs, 'creating the database', createIn(conn, database), () =>
    conn.destroy(),
  );
}

/** A server that is down (restarting, failing over, not up yet): it may be back soon. */
const REFUSED = new Set(['ECONNREFUSED', 'ECONNRESET', 'PROTOCOL_CONNECTION_LOST']);

/**
 * `connect()` again every 500 ms while the server refuses the connection, for up to
 * `startTimeoutMs` (DB_START_TIMEOUT_MS): an app started beside a MySQL that is restarting
 * starts once it is back, instead of exiting at once with `connect ECONNREFUSED <address>`.
 * Past it, the error names MySQL and the step. Any other error is the caller's at once.
 */
async function connectWhileRefused(
  config: MysqlConnectionConfig,
  startTimeoutMs: number,
  connect: () => Promise<Connection>,
): Promise<Connection> {
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    try {
      return await connect();
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (!code || !REFUSED.has(code)) throw err;
      if (Date.now() >= deadline)
        throw new Error(
          `MySQL at ${config.host}:${config.port} refused every connection for ${startTimeoutMs} ms ` +
            `(DB_START_TIMEOUT_MS) while connecting: ${(err as Error).message}`,
        );
      await new Promise((r) => setTimeout(r, Math.min(500, deadline - Date.now())));
    }
  }
}

/** Node's `connect ETIMEDOUT`, said as the start's other time-outs are. */
function unanswered(config: MysqlConnectionConfig, ms: number, err: Error & { code?: string }) {
  if (err.code !== 'ETIMEDOUT') return err;
  return startTimedOut(config, ms, 'connecting');
}

async function createIn(conn: Connection, database: string): Promise<void> {
  try {
    await conn.query(`SET time_zone = '${LOOM_TIME_ZONE}'`);
    // Asked first: a user that may only read and write its database's tables (migrated by an
    // operator, DB_MIGRATIONS_RUN=false) is refused CREATE DATABASE even when it exists.
    const [found] = await conn.query<RowDataPacket[]>(
      'SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
      [database],
    );
    if (found.length) return;
    await conn.query(
      `CREATE DATABASE IF NOT EXISTS \`${database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`,
    );
  } finally {
    await conn.end();
  }
}

function tlsError(config: MysqlConnectionConfig, err: Error & { code?: string }) {
  const at = `MySQL at ${config.host}:${config.port}`;
  if (err.code === 'HANDSHAKE_NO_SSL_SUPPORT')
    return new Error(
      `${at} does not offer TLS, which MYSQL_URL's ssl option or MYSQL_SSL_CA asks for`,
    );
  // Node's verdict on the certificate: "self-signed certificate in certificate chain", …
  if (err.code === 'HANDSHAKE_SSL_ERROR')
    return new Error(
      `${at}: TLS failed (${err.message}); MYSQL_SSL_CA names the CA that signed the server's certificate`,
    );
  return undefined;
}

/** A TypeORM data source on the session table; migrations run when asked, synchronize never. */
export async function openSessionDataSource(opts: MysqlOptions): Promise<DataSource> {
  const config = mysqlConnectionConfig(opts.url, opts.sslCaFile);
  const startTimeoutMs = opts.startTimeoutMs ?? START_TIMEOUT_MS;
  await ensureDatabase(config, startTimeoutMs);
  const start: { opened: Set<mysql2.PoolConnection> | null } = { opened: new Set() };
  const dataSource = new DataSource({
    type: 'mysql',
    driver: utcMysql2(start),
    connectorPackage: 'mysql2',
    host: config.host,
    port: config.port,
    username: config.user,
    password: config.password,
    database: config.database,
    ssl: config.ssl,
    charset: 'utf8mb4_unicode_ci',
    timezone: 'Z',
    entities: [SessionStateEntity],
    migrations: SESSION_MIGRATIONS,
    migrationsTableName: 'loom_migrations',
    synchronize: false,
    logging: false,
    connectTimeout: opts.connectTimeoutMs ?? Math.min(5000, startTimeoutMs),
    // A bounded queue for a connection: past it a statement fails at once ("Queue limit
    // reached": UNAVAILABLE "overloaded" with a Retry-After) instead of waiting behind a database that stopped answering.
    extra: { connectionLimit: opts.poolSize ?? 10, queueLimit: 1000, enableKeepAlive: true },
  });
  const initializing = dataSource.initialize();
  // Given up on, the pool may still open later: then it is closed, not left to a caller that
  // only saw the start fail.
  const closeAll = () => {
    start.opened?.forEach((conn) => conn.destroy());
    initializing.then(() => dataSource.destroy()).catch(() => undefined);
  };
  await startStep(config, startTimeoutMs, 'opening the pool', initializing, closeAll);
  start.opened = null;
  if (opts.migrationsRun !== false)
    try {
      await runMigrationsExclusively(dataSource, config, startTimeoutMs);
    } catch (err) {
      // Not awaited: a connection of the pool may still wait on a statement.
      void dataSource.destroy().catch(() => undefined);
      throw err;
    }
  return dataSource;
}

/**
 * Several services start at once on one database: a named lock lets exactly one migrate, and the
 * others wait for it as long as it migrates, however long a large table takes: the holder asks
 * its server something on the lock's connection every little while, and the server ends that
 * connection, and so the lock, once it has been idle past DB_START_TIMEOUT_MS (wait_timeout): a
 * holder that hung or lost its network lets the next one take over instead of keeping every
 * other start waiting. Every statement is bounded by DB_START_TIMEOUT_MS against a server that
 * stops answering. The lock is held on a connection of its own, so a pool of one
 * (DB_POOL_SIZE=1) still has the connection the migrations run on.
 */
async function runMigrationsExclusively(
  dataSource: DataSource,
  config: MysqlConnectionConfig,
  startTimeoutMs: number,
): Promise<void> {
  // Named locks are server-wide: one name per database, so databases migrate independently.
  const name = `loom_migrations:${createHash('sha1').update(config.database).digest('hex')}`;
  const connectTimeout = Math.min(5000, startTimeoutMs);
  const lock = await createConnection({ ...config, connectTimeout, timezone: 'Z' }).catch((err) => {
    throw unanswered(config, connectTimeout, err);
  });
  const seconds = Math.max(1, Math.ceil(startTimeoutMs / 1000));
  let stalled = false;
  const abandonLock = () => {
    stalled = true;
    lock.destroy();
  };
  const ask = <T>(step: string, work: Promise<T>, ms = startTimeoutMs) =>
    startStep(config, ms, step, work, abandonLock);
  try {
    await ask('waiting for the migration lock', lock.query(`SET time_zone = '${LOOM_TIME_ZONE}'`));
    await ask(
      'waiting for the migration lock',
      lock.query(`SET SESSION wait_timeout = ${seconds}`),
    );
    // In slices: each answered within its wait and DB_START_TIMEOUT_MS, or the server stalled.
    const slice = Math.min(seconds, 5);
    for (;;) {
      const [[row]] = await ask(
        'waiting for the migration lock',
        lock.query<RowDataPacket[]>('SELECT GET_LOCK(?, ?) AS got', [name, slice]),
        startTimeoutMs + slice * 1000,
      );
      if (Number(row?.got) === 1) break;
      if (row?.got === null || row?.got === undefined)
        throw new Error(`MySQL at ${config.host}:${config.port} refused the migration lock`);
      // Held by a process that is migrating: it is alive, or the server would have ended it.
    }
    await migrateWhileAnswering(dataSource, config, startTimeoutMs, (step) =>
      ask(step, lock.query('SELECT 1')),
    );
  } finally {
    if (!stalled) {
      await lock.query('SELECT RELEASE_LOCK(?)', [name]).catch(() => undefined);
      await lock.end().catch(() => undefined);
    }
  }
}

/**
 * The pending migrations, each in its transaction, for as long as they take while the server
 * answers `ping` (a large table's ALTER may take minutes): a server that stops answering fails
 * the start. A migration's wait for a table another session holds (a long transaction) is
 * bounded by MySQL (lock_wait_timeout): one given up on by the client alone would stay queued
 * for that table, and every statement after it with it.
 */
async function migrateWhileAnswering(
  dataSource: DataSource,
  config: MysqlConnectionConfig,
  startTimeoutMs: number,
  ping: (step: string) => Promise<unknown>,
): Promise<void> {
  const seconds = Math.max(1, Math.ceil(startTimeoutMs / 1000));
  const runner = dataSource.createQueryRunner();
  let migrating = true;
  let stalled = false;
  const migrations = (async () => {
    await runner.query(`SET SESSION lock_wait_timeout = ${seconds}`);
    const executor = new MigrationExecutor(dataSource, runner);
    executor.transaction = 'each';
    await executor.executePendingMigrations().catch((err: unknown) => {
      if (!isContentionError(err)) throw err;
      throw new Error(
        `MySQL at ${config.host}:${config.port}: a migration waited ${seconds} s (DB_START_TIMEOUT_MS) ` +
          'for a table another session holds (a long transaction, LOCK TABLES); end it, or raise DB_START_TIMEOUT_MS',
      );
    });
    await runner.query('SET SESSION lock_wait_timeout = DEFAULT');
  })();
  migrations.catch(() => undefined);
  // Often enough that the lock's connection is never idle for its wait_timeout.
  const every = Math.min(5000, Math.floor(startTimeoutMs / 4));
  let timer: NodeJS.Timeout | undefined;
  const pings = (async () => {
    while (migrating) {
      await new Promise((resolve) => (timer = setTimeout(resolve, every)));
      if (migrating) await ping('migrating');
    }
  })();
  pings.catch(() => {
    stalled = true;
    destroyRunner(runner);
  });
  try {
    await Promise.race([migrations, pings.then(() => migrations)]);
  } finally {
    migrating = false;
    clearTimeout(timer);
    if (!stalled) await runner.release();
  }
}
