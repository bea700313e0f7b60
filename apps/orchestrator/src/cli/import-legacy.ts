import 'reflect-metadata';
import { promises as fs } from 'fs';
import * as path from 'path';
import { parseArgs } from 'util';
import { loadEnvOrExit, sessionOptionsFrom } from '@loom/agent-kit';
import { redactedReason } from '@loom/security';
import {
  assertPrincipal,
  createSessionInfra,
  LegacyImporter,
  pingRedis,
  SessionInfra,
  TieredSessionStore,
} from '@loom/session';

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
  // The apps' environment, validated as theirs (a bad REDIS_CLUSTER_NODES or NAT map is refused
  // naming it, exit 1), before any file is read.
  const env = loadEnvOrExit({}, 'tool');
  const files: string[] = [];
  for (const input of inputs) {
    const stat = await fs.stat(input);
    if (stat.isDirectory()) {
      for (const name of (await fs.readdir(input)).sort())
        if (name.endsWith('.json')) files.push(path.join(input, name));
    } else files.push(input);
  }
  const infra = await createSessionInfra({
    ...sessionOptionsFrom(env),
    profile: 'distributed', // the import writes MySQL (and Redis), whatever LOOM_PROFILE says
    databaseClaim: 'check', // a tool never claims a database; a wrong prefix is refused
  });
  let failed = 0;
  let done = 0;
  let stale: string[] = [];
  try {
    // The apps would go on serving what Redis holds of a conversation the import changes: a run
    // without Redis could neither update nor drop it (the store only remembers, in this process,
    // what to drop once Redis answers again, and this process exits).
    const unreachable = await redisProblem(infra);
    if (unreachable) {
      process.stderr.write(
        `import-legacy: the Redis at REDIS_URL does not answer (${unreachable}): nothing imported, ` +
          'as the apps would go on serving the copies it holds; run it again once Redis answers\n',
      );
      return 1;
    }
    const importer = new LegacyImporter(infra.store);
    for (const file of files) {
      // Redis lost since the last file: its copies that missed writes are dropped before more.
      stale = await dropMissed(infra);
      if (stale.length) break;
      const r = await importer.importFile({ tenantId, userId }, file);
      if (r.status === 'skipped') failed++;
      done++;
      process.stdout.write(`${JSON.stringify(r)}\n`);
    }
    if (!stale.length) stale = await dropMissed(infra);
  } finally {
    await infra.close();
  }
  if (stale.length) {
    process.stderr.write(
      `import-legacy: Redis stopped answering during the import and still holds older copies of ` +
        `${stale.includes('*') ? 'conversations' : stale.join(', ')}; ` +
        `${files.length - done} of ${files.length} files not imported. Run it again once Redis ` +
        'answers: it drops the cached copy of each conversation it imports\n',
    );
    return 1;
  }
  process.stdout.write(
    `${files.length - failed} of ${files.length} files imported or up to date\n`,
  );
  return failed ? 1 : 0;
}

/** How long a run waits for Redis to take back the copies that missed writes before it gives up. */
const SETTLE_MS = 10_000;

/** Why Redis does not answer (every master of a cluster), or null when it does. */
async function redisProblem(infra: SessionInfra): Promise<string | null> {
  if (!infra.redis) return null;
  try {
    await pingRedis(infra.redis);
    return null;
  } catch (err) {
    return redactedReason(err);
  }
}

/**
 * Drops the hot copies that missed writes (Redis lost part-way), waiting up to SETTLE_MS for
 * Redis to answer; the sessions still to drop ('*': the whole cache), none when done.
 */
async function dropMissed(infra: SessionInfra): Promise<string[]> {
  const store = infra.store;
  if (!(store instanceof TieredSessionStore)) return [];
  const until = Date.now() + SETTLE_MS;
  for (;;) {
    const stale = await store.dropMissedHotCopies();
    if (!stale.length || Date.now() >= until) return stale;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`import-legacy: ${redactedReason(err)}\n`);
    process.exit(1);
  },
);
