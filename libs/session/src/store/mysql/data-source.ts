import { createHash } from 'crypto';
import { createConnection, RowDataPacket } from 'mysql2/promise';
import { DataSource } from 'typeorm';
import { SESSION_MIGRATIONS } from '../../migrations';
import { SessionStateEntity } from './session-state.entity';

export interface MysqlOptions {
  url: string;
  poolSize?: number;
  /** Apply pending migrations on start (API.md: DB_MIGRATIONS_RUN). */
  migrationsRun?: boolean;
  connectTimeoutMs?: number;
}

function databaseName(url: string): string {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  if (!/^[A-Za-z0-9_$-]{1,64}$/.test(name))
    throw new Error(`MYSQL_URL names no valid database: "${name}"`);
  return name;
}

/** Creates the database named by `url` when it is missing (apps may start on an empty server). */
export async function ensureDatabase(url: string): Promise<void> {
  const name = databaseName(url);
  const server = new URL(url);
  server.pathname = '/';
  const conn = await createConnection({ uri: server.toString(), connectTimeout: 5000 });
  try {
    await conn.query(
      `CREATE DATABASE IF NOT EXISTS \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`,
    );
  } finally {
    await conn.end();
  }
}

/** A TypeORM data source on the session table; migrations run when asked, synchronize never. */
export async function openSessionDataSource(opts: MysqlOptions): Promise<DataSource> {
  await ensureDatabase(opts.url);
  const dataSource = new DataSource({
    type: 'mysql',
    url: opts.url,
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
  if (opts.migrationsRun !== false) await runMigrationsExclusively(dataSource, opts.url);
  return dataSource;
}

/**
 * Several services start at once on one database: a named lock lets exactly one migrate. The
 * lock is held on a connection of its own, so a pool of one (DB_POOL_SIZE=1) still has the
 * connection the migrations run on.
 */
async function runMigrationsExclusively(dataSource: DataSource, url: string): Promise<void> {
  // Named locks are server-wide: one name per database, so databases migrate independently.
  const name = `loom_migrations:${createHash('sha1').update(databaseName(url)).digest('hex')}`;
  const lock = await createConnection({ uri: url, connectTimeout: 5000 });
  try {
    const [[row]] = await lock.query<RowDataPacket[]>('SELECT GET_LOCK(?, 60) AS got', [name]);
    if (Number(row?.got) !== 1)
      throw new Error('another process held the migration lock for 60 s; start again');
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await lock.query('SELECT RELEASE_LOCK(?)', [name]).catch(() => undefined);
    await lock.end().catch(() => undefined);
  }
}
