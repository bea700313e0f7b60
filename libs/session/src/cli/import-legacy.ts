import 'reflect-metadata';
import { promises as fs } from 'fs';
import * as path from 'path';
import { assertPrincipal } from '../ids';
import { LegacyImporter } from '../legacy/legacy-importer';
import { openSessionDataSource, startTimeoutMs } from '../store/mysql/data-source';
import { MysqlSessionStore } from '../store/mysql/mysql-session.store';

const USAGE =
  'usage: npm run session:import-legacy -- --tenant <tenantId> --user <userId> <file.json|directory>…';

/** Imports old whole-document session files into MySQL (Redis refills itself on first read). */
async function main(argv: string[]): Promise<number> {
  const flag = (f: string) => (argv.includes(f) ? argv[argv.indexOf(f) + 1] : undefined);
  const tenantId = flag('--tenant');
  const userId = flag('--user');
  const inputs = argv.filter((a, i) => !a.startsWith('--') && !argv[i - 1]?.startsWith('--'));
  if (!tenantId || !userId || inputs.length === 0) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  assertPrincipal(tenantId, 'tenant');
  assertPrincipal(userId, 'user');
  const files: string[] = [];
  for (const input of inputs) {
    const stat = await fs.stat(input);
    if (stat.isDirectory()) {
      for (const name of (await fs.readdir(input)).sort())
        if (name.endsWith('.json')) files.push(path.join(input, name));
    } else files.push(input);
  }
  const store = new MysqlSessionStore(
    await openSessionDataSource({
      url: process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/loom',
      sslCaFile: process.env.MYSQL_SSL_CA || undefined,
      startTimeoutMs: startTimeoutMs(process.env.DB_START_TIMEOUT_MS),
    }),
  );
  const importer = new LegacyImporter(store);
  let failed = 0;
  try {
    for (const file of files) {
      const r = await importer.importFile({ tenantId, userId }, file);
      if (r.status === 'skipped') failed++;
      process.stdout.write(`${JSON.stringify(r)}\n`);
    }
  } finally {
    await store.close();
  }
  process.stdout.write(
    `${files.length - failed} of ${files.length} files imported or up to date\n`,
  );
  return failed ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`import-legacy: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
