import { LoggerService } from '@nestjs/common';
import { openRedis, RedisClient, RedisTarget } from '@loom/session';
import Redis, { Cluster } from 'ioredis';

/** ioredis events, called as `(connectionType, ...eventArgs)`. */
export type RedisStreamsEvents = Record<string, (...args: any[]) => void>;

/** A listener registered through `on()` before the connections existed. */
export type PendingListener = { event: string; callback: (...args: any[]) => void };

/**
 * `on()` of the client and the server: the listener goes on both connections, called with the
 * connection's type first, or waits in `pending` until createConnection() applies it.
 */
export function listenOnBoth(
  cmd: RedisClient | undefined,
  readers: Array<RedisClient | undefined>,
  pending: PendingListener[],
  event: string,
  callback: (...args: any[]) => void,
): void {
  if (cmd && readers.length && readers.every(Boolean)) {
    cmd.on(event, (...args) => callback('cmd', ...args));
    readers.forEach((reader) => reader!.on(event, (...args) => callback('reader', ...args)));
  } else {
    pending.push({ event, callback });
  }
}

/** `unwrap()` of the client and the server: `[commandConnection, blockingReaderConnection]`. */
export function unwrapBoth<T>(
  cmd: RedisClient | undefined,
  reader: RedisClient | undefined,
  init: string,
): T {
  if (!cmd || !reader) throw new Error(`Not initialized: call ${init}() first`);
  return [cmd, reader] as T;
}

export interface ConnectionHooks {
  /** `cmd` or `reader`: passed first to user listeners and used in logs. */
  type: string;
  logger: LoggerService;
  /** Receives `connected` / `reconnecting`. */
  status: (status: 'connected' | 'reconnecting') => void;
  /** Listeners registered through `on()` before the connection existed. */
  listeners: PendingListener[];
  /** A blocking reader's BLOCK (ms): see BLOCKED_READ_GRACE_MS. */
  blockMs?: number;
  /** A command connection's (no `blockMs`): see COMMAND_TIMEOUT_MS. */
  commandTimeoutMs?: number;
}

/**
 * How long past its BLOCK a blocking reader waits for an answer before it drops its socket and
 * reconnects (the read is sent again). A connection whose server vanished without a reset (a
 * failover to another host at the same address, a host gone) tells a client that only waits
 * nothing, ever: TCP reports no error while nothing is written, and a blocked read writes nothing.
 */
export const BLOCKED_READ_GRACE_MS = 5000;

/**
 * The default time a command connection (XADD, XACK, XAUTOCLAIM, replies…) waits for an answer:
 * the command then fails (a call `UNAVAILABLE`), and a connection that heard nothing meanwhile
 * drops its socket and connects again. A Redis host gone without a reset (cable pulled, VM
 * frozen, failed over to another host at its address) otherwise held every command for the
 * kernel's retransmission time-out, about 15 minutes: every dispatch failed `TIMEOUT` after
 * AGENT_TIMEOUT_MS, and an agent's replies were never written.
 */
export const COMMAND_TIMEOUT_MS = 5000;

/**
 * A connection that reconnects forever and queues commands while Redis is away; a command
 * connection's commands fail after `commandTimeoutMs` all the same (queued ones too).
 */
export function createConnection(
  target: RedisTarget,
  name: string,
  hooks: ConnectionHooks,
): RedisClient {
  const commandTimeout =
    hooks.blockMs === undefined ? (hooks.commandTimeoutMs ?? COMMAND_TIMEOUT_MS) : undefined;
  const redis = openRedis(target, {
    connectionName: name.replace(/[^\w.:-]/g, '_'),
    maxRetriesPerRequest: null,
    enableOfflineQueue: true,
    retryStrategy: (times: number) => Math.min(100 * times, 2000),
    commandTimeout,
    socketTimeout:
      hooks.blockMs === undefined ? commandTimeout : hooks.blockMs + BLOCKED_READ_GRACE_MS,
    // READONLY (a failover left the connection on the demoted primary): openRedis reconnects.
    // The command refused fails and its caller tries again; one of a MULTI is never resent alone.
  });
  let failing = false; // log the first error of an outage only
  redis.on('error', (err: Error) => {
    if (!failing) hooks.logger.warn(`Redis ${hooks.type} connection: ${err.message}`);
    failing = true;
  });
  redis.on('ready', () => {
    failing = false;
    hooks.status('connected');
  });
  redis.on('reconnecting', () => hooks.status('reconnecting'));
  for (const { event, callback } of hooks.listeners) {
    redis.on(event, (...args: unknown[]) => callback(hooks.type, ...args));
  }
  return redis;
}

/**
 * Calls `reconnected` each time `redis` has connected again: a standalone connection's `ready`;
 * on a cluster, also each master connection's. A reset of one master's connection is no
 * reconnect of the Cluster client (no `ready` of its own): ioredis drops that node, opens a new
 * one (`+node`) and sends the commands the reset left unanswered there again. A replica promoted
 * by a failover is no new node either: ioredis (5.x) keeps its connection and turns it into a
 * master's at the next slot refresh (`refresh`), then sends there what the dead master left
 * unanswered; once that connection is ready (at once when it was open already), it counts too.
 */
export function onReconnected(redis: RedisClient, reconnected: () => void): void {
  redis.on('ready', reconnected);
  if (!(redis instanceof Cluster)) return;
  const replicas = new WeakSet<Redis>();
  redis.on('+node', (node: Redis) => {
    if (node.options.readOnly) replicas.add(node);
    else node.once('ready', reconnected);
  });
  redis.on('refresh', () => {
    for (const node of redis.nodes('master')) {
      if (!replicas.delete(node)) continue;
      if (node.status === 'ready') reconnected();
      else node.once('ready', reconnected);
    }
    redis.nodes('slave').forEach((node) => replicas.add(node));
  });
}

/** Redis refused a write because it is a replica now (nothing ran). */
export function isReadOnly(err: unknown): boolean {
  return errorMessage(err).startsWith('READONLY');
}

/** Quits gracefully when connected (pending writes go out), else just drops the socket. */
export async function closeConnection(redis: RedisClient | undefined): Promise<void> {
  if (redis?.status === 'ready') await redis.quit().catch(() => dropConnection(redis));
  else dropConnection(redis);
}

/**
 * Drops a connection for good, at once (a blocked XREADGROUP is interrupted). ioredis 5 keeps
 * the socketTimeout timer of a command still in flight after its socket is gone
 * (redis/ioredis#2147): it would hold a process that has closed everything else open for up to
 * socketTimeout more (blockMs + grace for a reader). It is cleared here, on every node.
 */
export function dropConnection(redis: RedisClient | undefined): void {
  if (!redis) return;
  const nodes: unknown[] = redis instanceof Cluster ? [redis, ...redis.nodes('all')] : [redis];
  redis.disconnect();
  for (const node of nodes) {
    const internal = node as { socketTimeoutTimer?: NodeJS.Timeout };
    clearTimeout(internal.socketTimeoutTimer);
    internal.socketTimeoutTimer = undefined;
  }
}

/** How long a dropped socket may take to close: ioredis destroys it then (its disconnectTimeout). */
const SOCKET_CLOSE_MS = 2000;

/**
 * {@link dropConnection}, then waits until the sockets it had open are closed (2 s at most): the
 * caller's close() resolves with nothing of it left, not even ioredis's own timer that destroys
 * a socket still open 2 s after its end.
 */
export async function dropConnectionAndWait(redis: RedisClient | undefined): Promise<void> {
  if (!redis) return;
  const nodes = redis instanceof Cluster ? redis.nodes('all') : [redis];
  const open = nodes.filter((node) => ['connecting', 'connect', 'ready'].includes(node.status));
  const closed = open.map((node) => new Promise((resolve) => node.once('end', resolve)));
  dropConnection(redis);
  const gaveUp = new AbortController();
  await Promise.race([Promise.all(closed), sleep(SOCKET_CLOSE_MS, gaveUp.signal)]);
  gaveUp.abort();
}

/** Turns the flat `[field, value, field, value]` array of a stream entry into an object. */
export function fieldsToRecord(fields: unknown): Record<string, string> {
  const record: Record<string, string> = {};
  if (!Array.isArray(fields)) return record;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    record[String(fields[i])] = String(fields[i + 1]);
  }
  return record;
}

/** Parses JSON, or returns undefined for a missing field / invalid JSON. */
export function parseJson(value: string | undefined): unknown {
  if (value === undefined) return undefined;
  try {
    return JSON.parse(value);
  } catch {
    return undefined;
  }
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * `work`, or undefined once `signal` aborts. ioredis never settles a command queued while it
 * waits to reconnect if it is disconnected then: a loop that awaits one must not wait for it.
 * A rejection of `work` after the abort is dropped.
 */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  return new Promise<T | undefined>((resolve, reject) => {
    const done = (): void => {
      work.catch(() => undefined);
      resolve(undefined);
    };
    if (signal.aborted) return done();
    signal.addEventListener('abort', done, { once: true });
    work.then(
      (value) => (signal.removeEventListener('abort', done), resolve(value)),
      (err: unknown) => (signal.removeEventListener('abort', done), reject(err)),
    );
  });
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
