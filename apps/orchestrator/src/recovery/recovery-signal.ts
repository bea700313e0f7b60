import { Inject, Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import type Redis from 'ioredis';
import { duplicateRedis, isCluster, RedisClient } from '@loom/session';
import { SESSION_INFRA, SessionInfra } from '@loom/session';
import { ORCHESTRATOR_ID } from '../turn/task-run';

/** What one replica tells the others: tasks of `from` are due for recovery `inMs` from now. */
export interface RecoveryDue {
  from: string;
  inMs: number;
}

/** How often the idle subscriber PINGs Redis, and how long it waits for any answer (ms). */
const PING_EVERY_MS = 5000;
const PING_TIMEOUT_MS = 5000;

/**
 * A hint between orchestrator replicas, over Redis pub/sub on `<prefix>recovery:due`
 * (docs/recovery.md, "Stopping a process"): a stopping replica says when the tasks it gives up
 * become due (their capped leases end, or now for those it handed over), and a replica that
 * hears it scans then instead of at its next RECOVERY_INTERVAL_MS. Only a hint: the scan decides
 * as always, and a message lost (pub/sub is at most once, Redis away) only leaves the task to the
 * next regular scan.
 * The embedded profile (no Redis) has one orchestrator and nothing to tell.
 */
@Injectable()
export class RecoverySignal implements OnApplicationShutdown {
  private readonly log = new Logger('RecoverySignal');
  private readonly channel: string;
  private subscriber: RedisClient | null = null;
  private heartbeat?: NodeJS.Timeout;

  constructor(
    @Inject(SESSION_INFRA) private readonly infra: SessionInfra,
    @Inject(ORCHESTRATOR_ID) private readonly instanceId: string,
  ) {
    this.channel = `${infra.keys.prefix}recovery:due`;
  }

  /** Tells the other replicas that this one's unfinished tasks are due in `inMs`; never throws. */
  async publish(inMs: number): Promise<void> {
    const message: RecoveryDue = { from: this.instanceId, inMs: Math.max(0, Math.round(inMs)) };
    await this.infra.redis
      ?.publish(this.channel, JSON.stringify(message))
      .catch((err) => this.log.warn(`recovery signal not sent: ${(err as Error).message}`));
  }

  /** Calls `onDue` for every signal of another replica, until shutdown. */
  listen(onDue: (due: RecoveryDue) => void): void {
    if (!this.infra.redis || this.subscriber) return;
    // Its own connection (subscribed, it can send nothing else); resubscribes after a reconnect.
    // Its SUBSCRIBE waits for Redis however long it is away (maxRetriesPerRequest: null): the
    // session connection's limit would fail it while Redis is down at start, and ioredis only
    // resubscribes to channels it once subscribed to, so the replica would never hear a signal.
    // It only listens, so a host gone without a reset (failed over to another at its address, a
    // VM lost) tells it nothing: it PINGs (allowed while subscribed), and a socket that brings
    // nothing back within socketTimeout is dropped; ioredis then connects and resubscribes.
    const sub = duplicateRedis(this.infra.redis, {
      enableOfflineQueue: true,
      commandTimeout: undefined,
      maxRetriesPerRequest: null,
      socketTimeout: PING_TIMEOUT_MS,
    });
    sub.on('error', () => undefined);
    sub.on('message', (_channel: string, raw: string) => {
      const due = parse(raw);
      if (due && due.from !== this.instanceId) onDue(due);
    });
    sub
      .subscribe(this.channel)
      .catch((err) => this.log.warn(`recovery signals not heard: ${(err as Error).message}`));
    this.subscriber = sub;
    const cluster = isCluster(sub);
    this.heartbeat = setInterval(() => ping(listening(sub), cluster), PING_EVERY_MS).unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.heartbeat);
    this.subscriber?.disconnect();
    this.subscriber = null;
  }
}

/**
 * The connection that holds the subscription: standalone, the client's own; a Cluster client
 * subscribes on a connection of its own to one node (ioredis 5.x `ClusterSubscriber`), which a
 * PING of the client never uses.
 */
function listening(sub: RedisClient): Redis | null {
  if (!isCluster(sub)) return sub;
  const inner = sub as unknown as { subscriber?: { getInstance(): Redis | null } };
  return inner.subscriber?.getInstance() ?? null;
}

/**
 * One PING at a time, and only on a live connection (a queued one would pile up while away).
 * Unanswered within PING_TIMEOUT_MS, the connection is dropped: standalone by its socketTimeout
 * (then it reconnects and resubscribes); a cluster's subscription connection, which has none,
 * here (ioredis then subscribes again on a connection to a node of the pool).
 */
function ping(conn: Redis | null, cluster: boolean): void {
  if (!conn || conn.status !== 'ready' || pinging.has(conn)) return;
  pinging.add(conn);
  // Its retryStrategy is null: dropped, it ends, and ioredis picks a node to subscribe on.
  const silent = cluster ? setTimeout(() => conn.disconnect(true), PING_TIMEOUT_MS) : undefined;
  void conn
    .ping()
    .catch(() => undefined)
    .finally(() => {
      clearTimeout(silent);
      pinging.delete(conn);
    });
}
const pinging = new WeakSet<Redis>();

function parse(raw: string): RecoveryDue | null {
  try {
    const v = JSON.parse(raw) as Partial<RecoveryDue>;
    if (typeof v.from !== 'string' || typeof v.inMs !== 'number' || !Number.isFinite(v.inMs))
      return null;
    return { from: v.from, inMs: Math.min(Math.max(0, v.inMs), 86_400_000) };
  } catch {
    return null;
  }
}
