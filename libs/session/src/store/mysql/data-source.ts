import { createConnection } from 'mysql2/promise';
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
  if (opts.migrationsRun !== false) await runMigrationsExclusively(dataSource);
  return dataSource;
}

/** Several services start at once on one database: a named lock lets exactly one migrate. */
async function runMigrationsExclusively(dataSource: DataSource): Promise<void> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query("SELECT GET_LOCK('loom_migrations', 60)");
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await runner.query("SELECT RELEASE_LOCK('loom_migrations')").catch(() => undefined);
    await runner.release();
  }
}
