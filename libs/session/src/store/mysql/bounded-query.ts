import { DataSource } from 'typeorm';
import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { isReadOnlyServer } from './mysql-errors';

/**
 * One statement on a pooled connection of its own, answered within `timeoutMs` or rejected
 * UNAVAILABLE. Should it outlast that, its connection leaves the pool and is closed: a
 * connection that stopped answering (a failover without a reset leaves the old server's
 * connections hanging) would otherwise hold its place in the pool until TCP gave up, a quarter
 * of an hour later, and every statement would queue behind it and time out; the pool opens a new
 * one instead. So does a connection whose server turned out read-only: after a failover, the
 * former primary, still up, which the connections opened before it reach, while a new one
 * reaches the new primary. Every statement on the session pool goes through here (the store's,
 * the readiness probe's): one left waiting would keep its connection stuck as well.
 * `discardWhen` tells from an answer that its server is read-only all the same (the readiness
 * probe reads @@read_only): its connection is closed too.
 */
export function queryWithin<T = any>(
  db: DataSource,
  sql: string,
  params: unknown[] | undefined,
  timeoutMs: number,
  discardWhen?: (answer: T) => boolean,
): Promise<T> {
  const runner = db.createQueryRunner();
  const discard = () => {
    // mysql2's PoolConnection, once the runner has taken one from the pool.
    const conn = (
      runner as unknown as {
        databaseConnection?: { destroy(): void; stream?: { destroy(): void } };
      }
    ).databaseConnection;
    conn?.destroy();
    conn?.stream?.destroy();
  };
  const statement = db
    .query<T>(sql, params, runner)
    .then((answer: T) => {
      if (discardWhen?.(answer)) discard();
      return answer;
    })
    .catch((err: unknown) => {
      if (isReadOnlyServer(err)) discard();
      throw err;
    })
    .finally(() => runner.release());
  // The statement may still settle after the time-out; nobody waits for it then.
  statement.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      discard();
      reject(
        new LoomError(
          LoomErrorCode.UNAVAILABLE,
          `the durable store did not answer in ${timeoutMs} ms`,
        ),
      );
    }, timeoutMs);
  });
  return Promise.race([statement, timeout]).finally(() => clearTimeout(timer));
}
