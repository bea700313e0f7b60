import 'reflect-metadata';
import {
  agentExecutePattern,
  agentHealthPattern,
  loadEnvOrExit,
  RedisAgentRegistry,
  retireRequestStream,
  sessionOptionsFrom,
} from '@loom/agent-kit';
import {
  createSessionInfra,
  SessionInfra,
  SharedClock,
  SystemRepository,
  SystemSessions,
} from '@loom/session';
import { redactedReason } from '@loom/security';
import { RETIRED_KEY } from '../turn/agent-catalog';
import { parseRetireArgs, RETIRE_USAGE } from './retire-args';

/**
 * `npm run agents:retire -- <agentType>…`: the planner stops using agent types that were removed
 * (within a minute, as orchestrators refresh their catalog) instead of queueing their steps for
 * 7 days. A retired type comes back by itself when an instance of it runs again. A type the
 * catalog never saw is refused (a typo would otherwise be recorded and reported as done), unless
 * `--force`. Then, for each type with no live instance, the requests still queued in its stream
 * (none will ever be answered) are failed at once on their callers' reply streams and the stream
 * is deleted (see drainRetired); a type with live instances keeps its stream.
 */
async function main(args: string[]): Promise<number> {
  const parsed = parseRetireArgs(args);
  if (parsed?.help) {
    process.stdout.write(`${RETIRE_USAGE}\n`);
    return 0;
  }
  if (!parsed) {
    process.stderr.write(`${RETIRE_USAGE}\n`);
    return 2;
  }
  const { force, types } = parsed;
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
    // On the deployment's clock (Redis TIME), as orchestrators stamp their sightings of a type:
    // this host's may be minutes off theirs (the command is often run from another machine).
    const clock = new SharedClock(infra.redis);
    await clock.sync();
    for (const type of types) retired[type] = Math.round(clock.now());
    await system.saveValue(SystemSessions.catalog, RETIRED_KEY, retired);
    process.stdout.write(
      `retired ${types.join(', ')}: orchestrators stop planning them within a minute; ` +
        'an instance that starts again brings its type back\n',
    );
    return await drainRetired(infra, types);
  } finally {
    await infra.close();
  }
}

/**
 * The request stream of a retired type with no live instance: every request still in it is
 * failed (AGENT_FAILED, "<type> was retired") for the turn that waits for it, and the stream goes
 * with its consumer group, and its registry keys. 1 when Redis is out of reach, requests kept
 * arriving or an instance started meanwhile (run it again).
 */
async function drainRetired(infra: SessionInfra, types: string[]): Promise<number> {
  const redis = infra.redis;
  if (!redis) return 0; // the embedded profile: no request streams
  if (redis.status !== 'ready') {
    process.stderr.write(
      'agents:retire: Redis is out of reach: queued requests were left; run it again\n',
    );
    return 1;
  }
  const prefix = infra.keys.prefix;
  const registry = new RedisAgentRegistry(redis, prefix);
  const live = new Set((await registry.live()).map((a) => a.descriptor.agentType));
  let code = 0;
  for (const type of types) {
    if (live.has(type)) {
      process.stdout.write(
        `${type}: instances still run and keep its queued requests; run this again once they are stopped\n`,
      );
      continue;
    }
    const error = { code: 'AGENT_FAILED', message: `${type} was retired` };
    const done = await retireRequestStream(redis, prefix, agentExecutePattern(type), error);
    // Its health pattern's stream too, with its consumer group (a probe waiting fails at once).
    const health = await retireRequestStream(redis, prefix, agentHealthPattern(type), error);
    done.deleted &&= health.deleted;
    // Its registry keys too (none is refreshed once its instances are gone), unless one started.
    const forgotten = done.deleted && (await registry.forget(type));
    process.stdout.write(
      `${type}: ${done.failed} queued requests failed, ${done.expired} expired ones dropped, ` +
        `${forgotten ? 'its request stream and registry keys deleted' : 'requests still arriving or an instance started: run this again'}\n`,
    );
    if (!forgotten) code = 1;
  }
  return code;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`agents:retire: ${redactedReason(err)}\n`);
    process.exit(1);
  },
);
