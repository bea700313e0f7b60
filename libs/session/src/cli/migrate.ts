import 'reflect-metadata';
import { redactedReason } from '@loom/security';
import { queryWithin } from '../store/mysql/bounded-query';
import { openSessionDataSource, startTimeoutMs } from '../store/mysql/data-source';

const USAGE =
  'usage: npm run migration:run   (applies pending migrations to MYSQL_URL, with MYSQL_SSL_CA; no arguments)';

/**
 * `npm run migration:run`: applies pending migrations to MYSQL_URL (with MYSQL_SSL_CA; creating the database if
 * missing), under the same named lock the apps take, then lists what is applied. For deployments
 * that start the apps with DB_MIGRATIONS_RUN=false.
 */
async function main(args: string[]): Promise<number> {
  // It takes no argument: one asking for help, or one meant for another tool, changes nothing.
  if (args.length) {
    const help = args.length === 1 && (args[0] === '--help' || args[0] === '-h');
    (help ? process.stdout : process.stderr).write(`${USAGE}\n`);
    return help ? 0 : 2;
  }
  const url = process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/loom';
  const timeoutMs = startTimeoutMs(process.env.DB_START_TIMEOUT_MS);
  const dataSource = await openSessionDataSource({
    url,
    sslCaFile: process.env.MYSQL_SSL_CA || undefined,
    migrationsRun: true,
    poolSize: 2,
    startTimeoutMs: timeoutMs,
  });
  try {
    // Bounded like every statement before it: a server that stopped answering ends the run.
    const rows: { name: string }[] = await queryWithin(
      dataSource,
      'SELECT name FROM loom_migrations ORDER BY id',
      [],
      timeoutMs,
    ).catch((err: Error) => {
      throw new Error(`migrations applied, but listing them: ${err.message} (DB_START_TIMEOUT_MS)`);
    });
    process.stdout.write(`migrations applied: ${rows.map((r) => r.name).join(', ')}\n`);
    return 0;
  } finally {
    await dataSource.destroy();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`migration:run: ${redactedReason(err)}\n`);
    process.exit(1);
  },
);
