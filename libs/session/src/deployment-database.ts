import { randomUUID } from 'crypto';
import { SYSTEM_TENANT, SystemSessions } from './conversation/system.repository';
import { LoomError, LoomErrorCode } from './errors/session-error';
import { RedisClient } from './redis/redis-client';
import { MysqlSessionStore } from './store/mysql/mysql-session.store';

/** Where an app's MYSQL_URL points, for the line that names it (never its password). */
export interface DatabasePlace {
  host: string;
  port: number;
  database: string;
}

interface Recorded {
  id: string;
  database: string;
  at: string;
}

/** The Redis key under which a deployment records the database its apps use. */
export const databaseRecordKey = (keyPrefix: string) => `${keyPrefix}deployment:database`;

/**
 * Every app of a deployment (one Redis, one key prefix) must use one MySQL database: an agent on
 * another one finds none of the orchestrator's tasks and fails every turn ("task not found").
 * The database carries an id of its own (a row, so a dump restored elsewhere or a promoted
 * replica keeps it); the first app records it in Redis under the prefix, and an app whose
 * database has another id refuses to start, naming both. A deliberate move to a new database:
 * delete the key (docs/configuration.md). `check` (operator tools) compares but records nothing.
 * Redis out of reach, or a database not migrated yet: nothing to compare, the start goes on.
 */
export async function checkDeploymentDatabase(
  durable: MysqlSessionStore,
  redis: RedisClient,
  keyPrefix: string,
  place: DatabasePlace,
  mode: 'claim' | 'check',
): Promise<void> {
  const scope = { tenantId: SYSTEM_TENANT };
  let id: string | null;
  try {
    if (mode === 'claim')
      await durable.create(scope, SystemSessions.deployment, 'databaseId', randomUUID());
    id = await durable.get<string>(scope, SystemSessions.deployment, 'databaseId');
  } catch (err) {
    if (LoomError.is(err, LoomErrorCode.UNAVAILABLE) && err.details?.schemaMissing) return;
    throw err;
  }
  if (!id || redis.status !== 'ready') return;
  const key = databaseRecordKey(keyPrefix);
  const mine: Recorded = { id, database: place.database, at: `${place.host}:${place.port}` };
  let found: string | null;
  try {
    found =
      mode === 'claim'
        ? await redis.set(key, JSON.stringify(mine), 'NX', 'GET')
        : await redis.get(key);
  } catch {
    return; // Redis went away meanwhile: the app starts without it, as it would have
  }
  const theirs = parseRecord(found);
  if (!theirs || theirs.id === id) return;
  throw new Error(
    `the deployment with LOOM_KEY_PREFIX=${JSON.stringify(keyPrefix)} uses MySQL database ` +
      `${theirs.database} at ${theirs.at}, not ${mine.database} at ${mine.at} (MYSQL_URL): every app ` +
      `of a deployment uses the same database; if it moved to this one on purpose, delete the ` +
      `Redis key ${key} (docs/configuration.md)`,
  );
}

function parseRecord(text: string | null): Recorded | null {
  if (!text) return null;
  try {
    const value = JSON.parse(text) as Partial<Recorded>;
    return typeof value.id === 'string'
      ? { id: value.id, database: String(value.database), at: String(value.at) }
      : null;
  } catch {
    return null;
  }
}
