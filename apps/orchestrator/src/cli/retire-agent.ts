import 'reflect-metadata';
import { loadEnvOrExit, sessionOptionsFrom } from '@loom/agent-kit';
import { createSessionInfra, SystemRepository, SystemSessions } from '@loom/session';
import { RETIRED_KEY } from '../turn/agent-catalog';

const USAGE = 'usage: npm run agents:retire -- <agentType>…';

/**
 * `npm run agents:retire -- <agentType>…`: the planner stops using agent types that were removed
 * (within a minute, as orchestrators refresh their catalog) instead of queueing their steps for
 * 7 days. A retired type comes back by itself when an instance of it runs again.
 */
async function main(types: string[]): Promise<number> {
  if (types.length === 0 || types.some((t) => !/^[a-z][a-z0-9-]{1,62}$/.test(t))) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const infra = await createSessionInfra(sessionOptionsFrom(loadEnvOrExit({}, 'tool')));
  try {
    const system = new SystemRepository(infra.store);
    const known =
      (await system.value<Record<string, unknown>>(SystemSessions.catalog, 'agents')) ?? {};
    const retired =
      (await system.value<Record<string, number>>(SystemSessions.catalog, RETIRED_KEY)) ?? {};
    for (const type of types) {
      if (!(type in known)) process.stderr.write(`agents:retire: ${type} is not in the catalog\n`);
      retired[type] = Date.now();
    }
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
