import { PrivateMariaDb, PrivateRedisServer } from '@loom/testing';
import { RunningSystem, startSystem, SystemOptions } from './system';

/** What an overload suite works on: its system, and the Redis and MariaDB of its own under it. */
export interface OverloadSystem {
  redis: PrivateRedisServer;
  db: PrivateMariaDb;
  sys: RunningSystem;
}

/**
 * Registers the suite's beforeAll/afterAll: a Redis and a MariaDB of the suite's own (so it may
 * flood, pause or empty them without touching the shared servers), and every app on them with
 * the rate limit off (the suites flood on purpose). `env` adds to (or overrides) that
 * environment; `without` lists apps not to start. The fields of the returned object are set once
 * beforeAll has run: read them inside the tests.
 */
export function useOverloadSystem(
  database: string,
  env: Record<string, string> = {},
  opts: Pick<SystemOptions, 'without'> = {},
): OverloadSystem {
  const suite = {} as OverloadSystem;
  beforeAll(async () => {
    [suite.redis, suite.db] = await Promise.all([
      PrivateRedisServer.start(),
      PrivateMariaDb.start(),
    ]);
    suite.sys = await startSystem({
      env: {
        REDIS_URL: suite.redis.url,
        MYSQL_URL: `${suite.db.url}/${database}`,
        LOOM_RATE_LIMIT_PER_MINUTE: '0',
        ...env,
      },
      without: opts.without,
    });
  });
  afterAll(async () => {
    await suite.sys?.stop();
    await Promise.all([suite.redis?.kill(), suite.db?.destroy()]);
  });
  return suite;
}

/** Only the orchestrator: for the suites that flood reads, not turns. */
export const NO_AGENTS = ['legal-research-agent', 'labor-law-agent', 'contract-law-agent'];
