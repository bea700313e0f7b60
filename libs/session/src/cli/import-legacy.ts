import 'reflect-metadata';
import { promises as fs } from 'fs';
import * as path from 'path';
import { parseArgs } from 'util';
import { assertPrincipal } from '../ids';
import { LegacyImporter } from '../legacy/legacy-importer';
import { createSessionInfra } from '../session.providers';
import { startTimeoutMs } from '../store/mysql/data-source';

const USAGE =
  'usage: npm run session:import-legacy -- --tenant <tenantId> --user <userId> <file.json|directory>…';

/**
 * Imports old whole-document session files through the deployment's store: MySQL, and Redis
 * where it holds the conversation (a resumed import, one in use), so no app goes on serving the
 * older copy Redis held.
 */
async function main(argv: string[]): Promise<number> {
  // Strict: an unknown flag is refused, never taken with the argument after it (a file there
  // would be left out of the import without a word), and so is a flag given twice.
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: true,
      options: {
        tenant: { type: 'string' },
        user: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      tokens: true,
    });
  } catch (err) {
    process.stderr.write(
      `import-legacy: ${(err as Error).message.replace(/\. To specify[^]*$/, '')}\n${USAGE}\n`,
    );
    return 2;
  }
  const { values, positionals: inputs, tokens } = parsed;
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const twice = ['tenant', 'user'].find(
    (name) => tokens.filter((t) => t.kind === 'option' && t.name === name).length > 1,
  );
  if (twice) {
    process.stderr.write(`import-legacy: --${twice} is given more than once\n${USAGE}\n`);
    return 2;
  }
  const tenantId = values.tenant;
  const userId = values.user;
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
  const infra = await createSessionInfra({
    profile: 'distributed',
    mysqlUrl: process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/loom',
    mysqlSslCa: process.env.MYSQL_SSL_CA || undefined,
    mysqlStartTimeoutMs: startTimeoutMs(process.env.DB_START_TIMEOUT_MS),
    redisUrl: process.env.REDIS_URL || 'redis://127.0.0.1:6379',
    redisClusterNodes: (process.env.REDIS_CLUSTER_NODES ?? '')
      .split(',')
      .map((node) => node.trim())
      .filter(Boolean),
    keyPrefix: process.env.LOOM_KEY_PREFIX || 'loom:',
    databaseClaim: 'check', // a tool never claims a database; a wrong prefix is refused
  });
  const importer = new LegacyImporter(infra.store);
  let failed = 0;
  try {
    for (const file of files) {
      const r = await importer.importFile({ tenantId, userId }, file);
      if (r.status === 'skipped') failed++;
      process.stdout.write(`${JSON.stringify(r)}\n`);
    }
  } finally {
    await infra.close();
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
