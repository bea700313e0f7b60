import 'reflect-metadata';
import { openSessionDataSource } from '../store/mysql/data-source';

/**
 * `npm run migration:run`: applies pending migrations to MYSQL_URL (with MYSQL_SSL_CA; creating the database if
 * missing), under the same named lock the apps take, then lists what is applied. For deployments
 * that start the apps with DB_MIGRATIONS_RUN=false.
 */
async function main(): Promise<number> {
  const url = process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/loom';
  const dataSource = await openSessionDataSource({
    url,
    sslCaFile: process.env.MYSQL_SSL_CA || undefined,
    migrationsRun: true,
    poolSize: 2,
  });
  try {
    const rows: { name: string }[] = await dataSource.query(
      'SELECT name FROM loom_migrations ORDER BY id',
    );
    process.stdout.write(`migrations applied: ${rows.map((r) => r.name).join(', ')}\n`);
    return 0;
  } finally {
    await dataSource.destroy();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`migration:run: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
