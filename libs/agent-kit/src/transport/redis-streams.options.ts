import type { ClusterNatMap } from '@loom/session';

/** Options of the Redis Streams server (and, in part, of the client). */
export interface RedisStreamsOptions {
  /** e.g. `redis://127.0.0.1:6379/0`; on a cluster, its credentials and TLS. */
  redisUrl: string;
  /** `host:port` seeds of a Redis Cluster (REDIS_CLUSTER_NODES); none: standalone Redis. */
  redisClusterNodes?: string[];
  /** Where the cluster's announced nodes are reached (REDIS_CLUSTER_NAT_MAP); none: where they say. */
  redisClusterNatMap?: ClusterNatMap;
  /** Prepended to every key this transport touches, e.g. `loom:`. */
  keyPrefix: string;
  /** Consumer name inside the group; defaults to `<host>-<pid>-<random>`, unique per server. */
  consumerName?: string;
  /** How long one XREAD/XREADGROUP blocks (ms). Default 1000. */
  blockMs?: number;
  /** A request pending this long on a dead consumer is reclaimed (ms). Default 30000. */
  claimIdleMs?: number;
  /** A request delivered more often than this is dead-lettered. Default 5. */
  maxDeliveries?: number;
  /** Handlers running at once per server. Default 16. */
  concurrency?: number;
  /** A consumer holding nothing and idle this long belongs to a gone instance: forgotten (ms). Default 1 h. */
  forgetConsumersAfterMs?: number;
  /** See {@link RedisStreamsClientOptions.commandTimeoutMs}. Default 5000. */
  commandTimeoutMs?: number;
  /**
   * A request whose `data` is longer than this (characters of its JSON) is answered
   * `PAYLOAD_TOO_LARGE` without being parsed. Default 256 KiB (an agent's execute payload is
   * about 1 KB).
   */
  maxRequestChars?: number;
  /**
   * A dead-letter copy is kept this long at most (ms): each dead-lettering drops the copies
   * added longer ago, and the server trims its patterns' dead-letter streams every minute (or
   * every retention, when shorter), so a quiet stream keeps none past it. Default 7 days.
   */
  deadLetterRetentionMs?: number;
  /** Hands every request to its handler twice (sequentially) to prove handlers idempotent. */
  duplicateDeliveryForTests?: boolean;
}

/** Options of the Redis Streams client. */
export interface RedisStreamsClientOptions {
  redisUrl: string;
  redisClusterNodes?: string[];
  redisClusterNatMap?: ClusterNatMap;
  keyPrefix: string;
  /** How long one XREAD on the reply stream blocks (ms). Default 1000. */
  blockMs?: number;
  /**
   * A call fails with `TIMEOUT` after this long without a sign of life (ms): from when it was
   * sent (a request nobody picks up), or from the last progress its handler reported. Default
   * 30000.
   */
  timeoutMs?: number;
  /**
   * The longest a call waits in all, progress or not (ms); also the request's deadline. Above
   * `timeoutMs`, servers report progress while its handler runs. Default `timeoutMs`: no
   * progress, a call waits `timeoutMs` at most.
   */
  maxExecutionMs?: number;
  /**
   * A command (not a blocking read) unanswered this long fails, and its connection, on which
   * nothing came back meanwhile, is dropped and opened again (ms): a Redis host gone without a
   * reset is noticed then, not after the kernel's retransmission time-out. Default 5000.
   */
  commandTimeoutMs?: number;
  /**
   * A request stays in its stream this long at most (ms): each request's XADD drops the entries
   * added longer ago, read or not (a stream no agent instance reads would keep them for good).
   * Default the longer of an hour and twice `maxExecutionMs`: well past their deadlines.
   */
  requestRetentionMs?: number;
}

/** The error object a failed call rejects with (besides the handler's own RpcException payloads). */
export interface RedisStreamsError {
  code: 'TIMEOUT' | 'UNAVAILABLE' | 'DEAD_LETTERED';
  message: string;
  /** For a `TIMEOUT`: `silence` (no sign of life for `timeoutMs`) or `total` (`maxExecutionMs`). */
  limit?: 'silence' | 'total';
}

/**
 * Why the server stopped waiting for a handler, the reason its context's signal aborts with:
 * `deadline`, its caller gave up on the request (the deadline passed, or it was dead-lettered
 * or skipped); `closing`, the server is stopping and its drain is over (the request stays
 * pending: another instance takes it over, and this handler's reply is dropped).
 */
export class HandlerCancelled extends Error {
  constructor(readonly why: 'deadline' | 'closing') {
    super(why === 'deadline' ? "the request's caller stopped waiting" : 'the server is stopping');
    this.name = 'HandlerCancelled';
  }
}

export const REDIS_STREAMS_TRANSPORT = Symbol('REDIS_STREAMS');
export const CONSUMER_GROUP = 'workers';
export const REPLY_MAXLEN = 10000;
/**
 * The dead-letter stream of a pattern keeps about this many of the latest entries (each for
 * `deadLetterRetentionMs` at most).
 */
export const DEAD_LETTER_MAXLEN = 10000;
export const REPLY_TTL_MS = 5 * 60 * 1000;
/**
 * A handler error with this code sends no reply and leaves its entry pending: another delivery
 * of the same request took the work over (it lost its claim while cut off) and answers it.
 */
export const WITHHELD_CODE = 'SUPERSEDED';

export const DEFAULTS = {
  blockMs: 1000,
  claimIdleMs: 30000,
  maxDeliveries: 5,
  concurrency: 16,
  timeoutMs: 30000,
  forgetConsumersAfterMs: 3_600_000,
  maxRequestChars: 256 * 1024,
  deadLetterRetentionMs: 7 * 86_400_000,
} as const;

/** Stream that carries the requests of one pattern (hash tag keeps a pattern on one cluster slot). */
export function requestStreamKey(keyPrefix: string, pattern: string): string {
  return `${keyPrefix}rpc:{${pattern}}`;
}

/** Where requests that were delivered too often end up. */
export function deadLetterStreamKey(keyPrefix: string, pattern: string): string {
  return `${keyPrefix}rpc:dead:{${pattern}}`;
}

/** Marks a request (by id) as added to its pattern's stream: its stream's slot, a key of its own. */
export function sentMarkerKey(keyPrefix: string, pattern: string, id: string): string {
  return `${keyPrefix}rpc:sent:{${pattern}}:${id}`;
}

/**
 * The reply stream of one client instance. Its slot differs from the request streams': on a
 * cluster an agent writes the reply, then acknowledges the request (see writeReply).
 */
export function replyStreamKey(keyPrefix: string, clientId: string): string {
  return `${keyPrefix}rpc:reply:${clientId}`;
}
