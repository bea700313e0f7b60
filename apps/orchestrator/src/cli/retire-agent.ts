import 'reflect-metadata';
import { loadEnvOrExit, sessionOptionsFrom } from '@loom/agent-kit';
import { createSessionInfra, SystemRepository, SystemSessions } from '@loom/session';
import { RETIRED_KEY } from '../turn/agent-catalog';

const USAGE = 'usage: npm run agents:retire -- [--force] <agentType>…';

/**
 * `npm run agents:retire -- <agentType>…`: the planner stops using agent types that were removed
 * (within a minute, as orchestrators refresh their catalog) instead of queueing their steps for
 * 7 days. A retired type comes back by itself when an instance of it runs again. A type the
 * catalog never saw is refused (a typo would otherwise be recorded and reported as done), unless
 * `--force`.
 */
async function main(args: string[]): Promise<number> {
  const force = args.includes('--force');
  const types = args.filter((a) => a !== '--force');
  if (types.length === 0 || types.some((t) => !/^[a-z][a-z0-9-]{1,62}$/.test(t))) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const infra = await createSessionInfra({
    ...sessionOptionsFrom(loadEnvOrExit({}, 'tool')),
    databaseClaim: 'check', // a tool never claims a database for its prefix
  });
  try {
    const system = new SystemRepository(infra.store);
    const known =
      (await system.value<Record<string, unknown>>(SystemSessions.catalog, 'agents')) ?? {};
    const retired =
      (await system.value<Record<string, number>>(SystemSessions.catalog, RETIRED_KEY)) ?? {};
    const unknown = types.filter((t) => !Object.hasOwn(known, t));
    if (unknown.length && !force) {
      process.stderr.write(
        `agents:retire: not in the catalog: ${unknown.join(', ')} (known: ${Object.keys(known).sort().join(', ') || 'none'}); nothing retired. --force records them anyway\n`,
      );
      return 1;
    }
    for (const type of types) retired[type] = Date.now();
    await system.saveValue(SystemSessions.catalog, RETIRED_KEY, retired);
    process.stdout.write(
      `retired ${types.join(', ')}: orchestrators stop planning them within a minute; ` +
        'an instance that starts again brings its type back\n',
    );
    return 0;
  } finally {
    await infra.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`agents:retire: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
