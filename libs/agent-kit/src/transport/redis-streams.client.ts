import { Logger } from '@nestjs/common';
import { ClientProxy, ReadPacket, WritePacket } from '@nestjs/microservices';
import { randomBytes } from 'crypto';
import type Redis from 'ioredis';
import { RedisClient, SharedClock, isCluster, masterOf, masters } from '@loom/session';
import {
  DEFAULTS,
  RedisStreamsClientOptions,
  RedisStreamsError,
  replyStreamKey,
  requestStreamKey,
  sentMarkerKey,
} from './redis-streams.options';
import { SendBy, entryMs } from './redis-streams.send-by';
import {
  COMMAND_TIMEOUT_MS,
  PendingListener,
  RedisStreamsEvents,
  closeConnection,
  dropConnection,
  createConnection,
  errorMessage,
  listenOnBoth,
  fieldsToRecord,
  isReadOnly,
  onReconnected,
  parseJson,
  sleep,
  unwrapBoth,
  unlessAborted,
} from './redis-streams.util';
import { progressInterval } from './redis-streams.progress';

const RETRY_DELAY_MS = 500;

/**
 * A request's XADD, once per request id: KEYS the stream and the request's marker (same hash
 * slot), ARGV the marker's lifetime (ms), the stream's retention (ms), then the entry's fields.
 * Returns the entry id, the first one's when the marker says it was added already: ioredis sends
 * a command again after a reconnect when its connection dropped before the answer, and one that
 * had run (a reset right after it) was added twice, the request run twice by the agent.
 * The XADD drops the stream's entries added more than the retention ago (MINID, on Redis's
 * clock, as entry ids are): past their deadline, worth nothing, and never deleted otherwise when
 * no instance of the agent type reads the stream (stopped for good but not retired).
 */
const SEND_ONCE = `
local first = redis.call('GET', KEYS[2])
if first then return first end
local t = redis.call('TIME')
local oldest = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[2])
local id = redis.call('XADD', KEYS[1], 'MINID', math.max(0, oldest), '*', unpack(ARGV, 3))
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return id`;
/** A request stream keeps its requests at least this long (see requestRetentionMs). */
const MIN_REQUEST_RETENTION_MS = 3_600_000;
const READ_BATCH = 100;

/** The two clocks of a pending call. */
interface CallTimers {
  /** Fires after `timeoutMs` without a sign of life; progress restarts it. */
  silence: NodeJS.Timeout;
  /** Fires at the deadline, `maxExecutionMs` after the call was sent. */
  total?: NodeJS.Timeout;
}

/**
 * Nest `ClientProxy` for {@link RedisStreamsServer}: requests go to the pattern's stream,
 * replies (and progress reports) come back on one reply stream per client instance.
 */
export class RedisStreamsClient extends ClientProxy<RedisStreamsEvents> {
  /** 128 random bits: names this client's reply stream. */
  readonly clientId = randomBytes(16).toString('hex');
  /** The stream this client's replies are written to. */
  readonly replyKey: string;
  private readonly logger = new Logger(RedisStreamsClient.name);
  private readonly timeoutMs: number;
  private readonly maxExecutionMs: number;
  /**
   * How long a request stays in its stream at most (ms): at least an hour and twice
   * `maxExecutionMs`, so long after its deadline (a request past it is skipped unanswered). Each
   * XADD drops those older; a request read and answered goes at once anyway.
   */
  readonly requestRetentionMs: number;
  private readonly blockMs: number;
  private cmd?: RedisClient;
  /** The time requests' deadlines are written on (Redis's, on `cmd`), as servers check them. */
  private clock = new SharedClock(null);
  private reader?: RedisClient;
  private stop = new AbortController();
  private readLoop?: Promise<void>;
  private lastId = '0-0';
  /** Set when the reader connected again: its next read first checks `lastId` (see recheckLastId). */
  private reconnected = false;
  private readonly timers = new Map<string, CallTimers>();
  /**
   * On a cluster, `clock` reads one master's: each stream's first XADD goes by the clock of the
   * master holding it (`nodeClocks`), and each XADD teaches its stream's own.
   */
  private readonly sendBy = new SendBy((key) => this.serverClockOf(key)?.offsetFloor());
  /**
   * On a cluster, each master's clock by `host:port`, read on its connection when the client is
   * ready and whenever ioredis opens a new one to it (`+node`: the old one ended, the master
   * restarted or failed over at its address, and a reading on it would fail for good).
   */
  private readonly nodeClocks = new Map<string, { node: Redis; clock: SharedClock }>();
  private listeners: PendingListener[] = [];
  /** Per pending call, the `seq` of the replies it was given (a streamed answer's values). */
  private readonly seen = new Map<string, Set<string>>();

  constructor(private readonly options: RedisStreamsClientOptions) {
    super();
    this.replyKey = replyStreamKey(options.keyPrefix, this.clientId);
    this.timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
    this.maxExecutionMs = Math.max(this.timeoutMs, options.maxExecutionMs ?? this.timeoutMs);
    this.requestRetentionMs =
      options.requestRetentionMs ?? Math.max(MIN_REQUEST_RETENTION_MS, 2 * this.maxExecutionMs);
    this.blockMs = options.blockMs ?? DEFAULTS.blockMs;
  }

  /**
   * Opens the connections and starts reading replies. Never waits for Redis: while it is
   * unreachable, requests queue and every call still ends within `timeoutMs` (no progress can
   * arrive then).
   */
  async connect(): Promise<void> {
    if (this.cmd) return;
    this.stop = new AbortController();
    this.cmd = this.connection('cmd');
    this.clock = new SharedClock(this.cmd);
    void this.clock.sync();
    const cmd = this.cmd;
    this.nodeClocks.clear();
    if (isCluster(cmd)) {
      cmd.on('ready', () => masters(cmd).forEach((n) => this.nodeClock(n)));
      cmd.on('+node', (node: Redis) => node.options.readOnly || this.nodeClock(node));
    }
    this.reader = this.connection('reader');
    this.readLoop = this.readReplies(this.reader);
  }

  /** Stops reading, fails pending calls with `UNAVAILABLE`, deletes the reply stream. */
  async close(): Promise<void> {
    this.stop.abort();
    this.failAll({ code: 'UNAVAILABLE', message: 'The client was closed' });
    dropConnection(this.reader);
    await this.readLoop;
    if (this.cmd?.status === 'ready') await this.cmd.del(this.replyKey).catch(() => undefined);
    await closeConnection(this.cmd);
    this.cmd = this.reader = this.readLoop = undefined;
  }

  /** Registers a listener on both connections (`(type, ...args)`, type `cmd` or `reader`). */
  override on<K extends string, C extends RedisStreamsEvents[K]>(event: K, callback: C): void {
    listenOnBoth(this.cmd, [this.reader], this.listeners, event, callback);
  }

  /** Returns `[commandConnection, blockingReaderConnection]`. */
  unwrap<T>(): T {
    return unwrapBoth<T>(this.cmd, this.reader, 'connect');
  }

  protected publish(
    partialPacket: ReadPacket,
    callback: (packet: WritePacket) => void,
  ): () => void {
    const packet = this.assignPacketId(partialPacket);
    const { id } = packet;
    const pattern = this.normalizePattern(packet.pattern);
    const key = requestStreamKey(this.options.keyPrefix, pattern);
    const now = this.clock.now();
    this.routingMap.set(id, callback);
    this.timers.set(id, this.callTimers(id));
    const fields = [
      'id',
      id,
      'replyTo',
      this.replyKey,
      'deadline',
      String(now + this.maxExecutionMs),
    ];
    if (this.maxExecutionMs > this.timeoutMs)
      fields.push(
        ...['startBy', String(now + this.timeoutMs)],
        ...['progressMs', String(progressInterval(this.timeoutMs))],
      );
    // An XADD that fails its command time-out fails the call, but may still run later (resent
    // after a reconnect, or held up in the network): past `sendBy` the agent skips it.
    const commandTimeoutMs = this.options.commandTimeoutMs ?? COMMAND_TIMEOUT_MS;
    const sendBy = this.sendBy.of(key, commandTimeoutMs);
    if (sendBy !== undefined) fields.push('sendBy', String(sendBy));
    if (!this.cmd) {
      this.fail(id, { code: 'UNAVAILABLE', message: 'The client is not connected' });
    } else {
      const cmd = this.cmd;
      const data = JSON.stringify(packet.data ?? null);
      // Past `sendBy` a copy added again is skipped anyway; without it, by the deadline.
      const once = String(sendBy === undefined ? this.maxExecutionMs : 2 * commandTimeoutMs);
      const marker = sentMarkerKey(this.options.keyPrefix, pattern, id);
      const send = () =>
        cmd.eval(
          SEND_ONCE,
          2,
          key,
          marker,
          once,
          this.requestRetentionMs,
          ...fields,
          'data',
          data,
        ) as Promise<string | null>;
      // READONLY: a failover left the connection on the demoted primary, which ran nothing;
      // sent again once it has connected to the new one.
      send()
        .catch((err: unknown) => (isReadOnly(err) ? send() : Promise.reject(err)))
        .then((entryId) => {
          if (!entryId) return;
          this.sendBy.observe(key, entryId);
          if (sendBy !== undefined && entryMs(entryId) > sendBy)
            this.fail(id, { code: 'UNAVAILABLE', message: 'Redis took the request too late' });
        })
        .catch((err: unknown) =>
          this.fail(id, { code: 'UNAVAILABLE', message: errorMessage(err) }),
        );
    }
    return () => this.forget(id);
  }

  /**
   * Adds the event once (SEND_ONCE, under an id of its own, its marker kept `maxExecutionMs`):
   * an XADD sent again by ioredis after a reset that lost its answer added it twice, and its
   * handlers ran it twice.
   */
  protected async dispatchEvent<T = any>(packet: ReadPacket): Promise<T> {
    if (!this.cmd) throw { code: 'UNAVAILABLE', message: 'The client is not connected' };
    const pattern = this.normalizePattern(packet.pattern);
    const key = requestStreamKey(this.options.keyPrefix, pattern);
    const id = randomBytes(16).toString('hex');
    const marker = sentMarkerKey(this.options.keyPrefix, pattern, id);
    const data = JSON.stringify(packet.data ?? null);
    const once = String(this.maxExecutionMs);
    const retention = this.requestRetentionMs;
    await this.cmd.eval(SEND_ONCE, 2, key, marker, once, retention, 'id', id, 'data', data);
    return undefined as T;
  }

  /**
   * The clock of the server holding `key` (on a cluster, read once per master, at the client's
   * ready or at its first request to that master), or undefined before the slot map has it.
   */
  private serverClockOf(key: string): SharedClock | undefined {
    if (!this.cmd) return undefined;
    if (!isCluster(this.cmd)) return this.clock;
    const node = masterOf(this.cmd, key);
    return node && this.nodeClock(node);
  }

  /**
   * The clock of `node`, a master's connection: read once on it, and again while no reading has
   * answered (a master away at the client's start). A new connection to the same `host:port`
   * gets a clock of its own: the one before it ended, and the server behind it may be another
   * host's (a failover or restart at the same address), its reading worth nothing here.
   */
  private nodeClock(node: Redis): SharedClock {
    const name = `${node.options.host}:${node.options.port}`;
    const known = this.nodeClocks.get(name);
    if (known?.node === node) {
      if (known.clock.offsetFloor() === undefined) void known.clock.sync();
      return known.clock;
    }
    const clock = new SharedClock(node);
    this.nodeClocks.set(name, { node, clock });
    void clock.sync();
    return clock;
  }

  private callTimers(id: string): CallTimers {
    const silence = setTimeout(
      () =>
        this.fail(id, {
          code: 'TIMEOUT',
          message: `No sign of life within ${this.timeoutMs} ms`,
          limit: 'silence',
        }),
      this.timeoutMs,
    );
    if (this.maxExecutionMs <= this.timeoutMs) return { silence };
    const total = setTimeout(
      () =>
        this.fail(id, {
          code: 'TIMEOUT',
          message: `No reply within ${this.maxExecutionMs} ms`,
          limit: 'total',
        }),
      this.maxExecutionMs,
    );
    return { silence, total };
  }

  private connection(type: 'cmd' | 'reader'): RedisClient {
    const {
      redisUrl: url,
      redisClusterNodes: clusterNodes,
      redisClusterNatMap: natMap,
    } = this.options;
    const name = `loom-rpc-client-${type}-${this.clientId}`;
    return createConnection({ url, clusterNodes, natMap }, name, {
      type,
      logger: this.logger,
      listeners: this.listeners,
      status: (status) => this.stop.signal.aborted || this._status$.next(status),
      blockMs: type === 'reader' ? this.blockMs : undefined,
      commandTimeoutMs: this.options.commandTimeoutMs,
    });
  }

  private async readReplies(reader: RedisClient): Promise<void> {
    const { signal } = this.stop;
    onReconnected(reader, () => (this.reconnected = true));
    while (!signal.aborted) {
      try {
        if (this.reconnected) await this.recheckLastId(reader, signal);
        // Abortable: with Redis away, close() would otherwise wait for it to come back.
        const reply = (await unlessAborted(
          reader.call(
            ...['XREAD', 'COUNT', READ_BATCH, 'BLOCK', this.blockMs],
            ...['STREAMS', this.replyKey, this.lastId],
          ),
          signal,
        )) as [string, [string, unknown][]][] | null | undefined;
        for (const [, entries] of reply ?? []) {
          for (const [entryId, fields] of entries) {
            this.lastId = entryId;
            this.route(fieldsToRecord(fields));
          }
          // A reply carries what the agent answered (the user's text, often): it leaves Redis
          // once read, not when the stream's TTL or MAXLEN would push it out, which steady
          // traffic postpones for good. Best effort: the TTL still bounds a failed XDEL.
          if (entries.length)
            void this.cmd
              ?.xdel(this.replyKey, ...entries.map(([entryId]) => entryId))
              .catch(() => undefined);
        }
      } catch (err) {
        if (signal.aborted) break;
        this.logger.warn(`Reply reader: ${errorMessage(err)}; retrying`);
        await sleep(RETRY_DELAY_MS, signal);
      }
    }
  }

  /**
   * After a reconnect: a reply stream that is gone, or whose last id is below `lastId`, is not
   * the one read so far (Redis came back empty, a restart without persistence, on a host whose
   * clock runs behind the old one's): what it holds, or gets, is new to this client, and an XREAD
   * from `lastId` would skip each reply whose id is below it until the clocks caught up (every
   * call failing TIMEOUT meanwhile). It is read from the start then. The read ioredis sent
   * again on the new connection, still from `lastId`, ends by its BLOCK first.
   */
  private async recheckLastId(reader: RedisClient, signal: AbortSignal): Promise<void> {
    this.reconnected = false; // a reconnect from now on asks again
    const last = await unlessAborted(
      (reader.call('XINFO', 'STREAM', this.replyKey) as Promise<unknown[]>).then(
        (info) => String(fieldsToRecord(info)['last-generated-id']),
        (err: unknown) => (/no such key/i.test(errorMessage(err)) ? '0-0' : Promise.reject(err)),
      ),
      signal,
    ).catch((err: unknown) => {
      this.reconnected = true; // not checked: the next read asks again
      throw err;
    });
    if (last !== undefined && compareIds(last, this.lastId) < 0) this.lastId = '0-0';
  }

  private route(fields: Record<string, string>): void {
    const callback = this.routingMap.get(fields.id ?? '');
    if (!callback) return; // timed out, or not ours
    if (fields.progress !== undefined) return void this.timers.get(fields.id!)?.silence.refresh();
    if (fields.seq !== undefined) {
      // Had already: ioredis wrote it again after a reset lost the agent's answer.
      const seen = this.seen.get(fields.id!) ?? new Set<string>();
      if (seen.has(fields.seq)) return;
      this.seen.set(fields.id!, seen.add(fields.seq));
    }
    const err = parseJson(fields.err);
    const isDisposed = fields.isDisposed === '1' || err !== undefined;
    if (isDisposed) this.forget(fields.id!);
    callback({ err, response: parseJson(fields.response), isDisposed });
  }

  private fail(id: string, err: RedisStreamsError): void {
    const callback = this.routingMap.get(id);
    this.forget(id);
    callback?.({ err, isDisposed: true });
  }

  private failAll(err: RedisStreamsError): void {
    for (const id of [...this.routingMap.keys()]) this.fail(id, err);
  }

  private forget(id: string): void {
    const timers = this.timers.get(id);
    clearTimeout(timers?.silence);
    clearTimeout(timers?.total);
    this.timers.delete(id);
    this.seen.delete(id);
    this.routingMap.delete(id);
  }
}

/** Orders two stream entry ids (`ms-seq`). */
function compareIds(a: string, b: string): number {
  const [aMs, aSeq] = a.split('-').map(BigInt);
  const [bMs, bSeq] = b.split('-').map(BigInt);
  return aMs !== bMs ? (aMs < bMs ? -1 : 1) : aSeq === bSeq ? 0 : aSeq < bSeq ? -1 : 1;
}
