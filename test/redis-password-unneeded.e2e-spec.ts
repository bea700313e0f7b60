import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import type { AppChild } from '@loom/testing';
const { startApp, stopAll, waitFor } = require('../scripts/lib/processes');

/**
 * A REDIS_URL with a password, for a Redis that needs none (the shared test Redis): the app runs
 * (a password set before the server's is, as in a rotation), and says so as every other line it
 * writes: a JSON log line (docs/configuration.md), not the Redis client's raw `[WARN] …` text.
 */
describe('system: an app given a Redis password the server does not need', () => {
  it.each(['orchestrator', 'labor-law-agent'])(
    '%s logs the warning as a JSON line',
    async (app) => {
      // A database and key prefix of each case's own: a deployment's prefix names its database.
      const db = await createTestDatabase('loom_redis_pw');
      const keys = createTestPrefix('redispw');
      const url = new URL(TEST_REDIS_URL);
      url.password = 'not-needed-password';
      const child: AppChild = startApp(app, {
        REDIS_URL: url.toString(),
        MYSQL_URL: db.url,
        LOOM_KEY_PREFIX: keys.prefix,
        LOOM_JWT_SECRET: 'redis-pw-jwt-secret-0123456789',
        LOOM_AGENT_SECRET: 'redis-pw-agent-secret-0123456789',
        LOOM_PROFILE: 'distributed',
        LOG_FORMAT: 'json',
        PORT: '0',
      });
      try {
        await waitFor(async () => child.lines.some((l) => /require a password/.test(l)), {
          what: 'the password warning',
          timeoutMs: 60_000,
        });
        const notJson = child.lines.filter((l) => {
          try {
            return typeof JSON.parse(l) !== 'object';
          } catch {
            return true;
          }
        });
        expect(notJson).toEqual([]);
        const warning = child.lines
          .map((l) => JSON.parse(l))
          .find((l) => /require a password/.test(l.msg));
        expect(warning).toMatchObject({ level: 'warn' });
      } finally {
        await stopAll([child]);
        await Promise.all([db.drop(), keys.cleanup()]);
      }
    },
  );
});
