import { createHash } from 'crypto';
import * as mysql2 from 'mysql2';
import { createConnection, RowDataPacket } from 'mysql2/promise';
import { DataSource } from 'typeorm';
import { SESSION_MIGRATIONS } from '../../migrations';
import { LOOM_TIME_ZONE, MysqlConnectionConfig, mysqlConnectionConfig } from './mysql-connection';
import { SessionStateEntity } from './session-state.entity';

export interface MysqlOptions {
  url: string;
  poolSize?: number;
  /** Apply pending migrations on start (API.md: DB_MIGRATIONS_RUN). */
  migrationsRun?: boolean;
  connectTimeoutMs?: number;
  /** MYSQL_SSL_CA: a PEM file of the CA that signed the server's certificate. */
  sslCaFile?: string;
}

/**
 * mysql2 whose pools pin every new connection's session time zone to UTC before handing it out
 * (the `connection` event comes before the first query is queued): NOW() and CURRENT_TIMESTAMP
 * then agree with the times the driver writes, whatever the server's default zone.
 */
const utcMysql2 = {
  ...mysql2,
  createPool: (config: mysql2.PoolOptions) =>
    mysql2
      .createPool(config)
      .on('connection', (conn) =>
        conn.query(`SET time_zone = '${LOOM_TIME_ZONE}'`, () => undefined),
      ),
};

/**
 * Creates the database named by `url` when it is missing (apps may start on an empty server);
 * one that exists is left alone, so a user without the CREATE privilege can start.
 * The first connection a process opens, so a TLS setting the server does not meet fails here,
 * saying so. In UTC like every other connection, though it reads and writes no time.
 */
export async function ensureDatabase(config: MysqlConnectionConfig): Promise<void> {
  const { database, ...server } = config;
  const conn = await createConnection({ ...server, connectTimeout: 5000, timezone: 'Z' }).catch(
    (err) => {
      throw tlsError(config, err) ?? err;
    },
  );
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
  await ensureDatabase(config);
  const dataSource = new DataSource({
    type: 'mysql',
    driver: utcMysql2,
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
    connectTimeout: opts.connectTimeoutMs ?? 5000,
    // A bounded queue for a connection: past it a statement fails at once ("Queue limit
    // reached", UNAVAILABLE) instead of waiting behind a database that stopped answering.
    extra: { connectionLimit: opts.poolSize ?? 10, queueLimit: 1000, enableKeepAlive: true },
  });
  await dataSource.initialize();
  if (opts.migrationsRun !== false) await runMigrationsExclusively(dataSource, config);
  return dataSource;
}

/**
 * Several services start at once on one database: a named lock lets exactly one migrate. The
 * lock is held on a connection of its own, so a pool of one (DB_POOL_SIZE=1) still has the
 * connection the migrations run on.
 */
async function runMigrationsExclusively(
  dataSource: DataSource,
  config: MysqlConnectionConfig,
): Promise<void> {
  // Named locks are server-wide: one name per database, so databases migrate independently.
  const name = `loom_migrations:${createHash('sha1').update(config.database).digest('hex')}`;
  const lock = await createConnection({ ...config, connectTimeout: 5000, timezone: 'Z' });
  try {
    await lock.query(`SET time_zone = '${LOOM_TIME_ZONE}'`);
    const [[row]] = await lock.query<RowDataPacket[]>('SELECT GET_LOCK(?, 60) AS got', [name]);
    if (Number(row?.got) !== 1)
      throw new Error('another process held the migration lock for 60 s; start again');
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await lock.query('SELECT RELEASE_LOCK(?)', [name]).catch(() => undefined);
    await lock.end().catch(() => undefined);
  }
}
