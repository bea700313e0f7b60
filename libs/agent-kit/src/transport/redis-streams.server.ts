import { Logger } from '@nestjs/common';
import {
  CustomTransportStrategy,
  MessageHandler,
  RpcException,
  Server,
  WritePacket,
} from '@nestjs/microservices';
import { NO_MESSAGE_HANDLER } from '@nestjs/microservices/constants';
import { randomBytes } from 'crypto';
import { hostname } from 'os';
import Redis from 'ioredis';
import { RedisStreamsContext } from './redis-streams.context';
import {
  CONSUMER_GROUP,
  DEFAULTS,
  REDIS_STREAMS_TRANSPORT,
  REPLY_MAXLEN,
  REPLY_TTL_MS,
  RedisStreamsOptions,
  deadLetterStreamKey,
  requestStreamKey,
} from './redis-streams.options';
import {
  createConnection,
  errorMessage,
  fieldsToRecord,
  parseJson,
  sleep,
} from './redis-streams.util';

interface Entry {
  key: string;
  pattern: string;
  entryId: string;
  fields: Record<string, string>;
  deliveryCount: number;
}

interface InFlight {
  key: string;
  entryId: string;
  deadline: number;
  /** Set when the entry was dead-lettered or skipped behind the handler's back: drop its reply. */
  abandoned: boolean;
}

/** ioredis events, called as `(connectionType, ...eventArgs)`. */
export type RedisStreamsEvents = Record<string, (...args: any[]) => void>;

type Multi = ReturnType<Redis['multi']>;

const RETRY_DELAY_MS = 500;
const RECLAIM_BATCH = 100;

/**
 * Nest microservice transport over Redis Streams consumer groups: every request is delivered
 * to exactly one server of the group, at least once (reclaimed from dead consumers).
 */
export class RedisStreamsServer
  extends Server<RedisStreamsEvents>
  implements CustomTransportStrategy
{
  protected override readonly logger = new Logger(RedisStreamsServer.name);
  private readonly consumer: string;
  private readonly blockMs: number;
  private readonly claimIdleMs: number;
  private readonly maxDeliveries: number;
  private readonly concurrency: number;
  private cmd?: Redis;
  private reader?: Redis;
  private streams = new Map<string, string>(); // stream key -> pattern
  private groupsReady = false;
  private stop = new AbortController();
  private loops: Promise<void>[] = [];
  private readonly inFlight = new Map<string, InFlight>(); // `${key} ${entryId}`
  private active = 0;
  private slotWaiters: (() => void)[] = [];
  private backlog: (() => void)[] = []; // delivered beyond the concurrency limit, not started yet
  private onIdle?: () => void;
  private closed = false;
  private pendingListeners: { event: string; callback: (...args: any[]) => void }[] = [];

  constructor(private readonly options: RedisStreamsOptions) {
    super();
    this.transportId = REDIS_STREAMS_TRANSPORT;
    this.consumer =
      options.consumerName ?? `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;
    this.blockMs = options.blockMs ?? DEFAULTS.blockMs;
    this.claimIdleMs = options.claimIdleMs ?? DEFAULTS.claimIdleMs;
    this.maxDeliveries = options.maxDeliveries ?? DEFAULTS.maxDeliveries;
    this.concurrency = Math.max(1, options.concurrency ?? DEFAULTS.concurrency);
  }

  /** Creates the consumer groups, then starts the read and reclaim loops. */
  listen(callback: (...optionalParams: unknown[]) => any): void {
    this.stop = new AbortController();
    this.closed = false;
    this.streams = new Map(
      [...this.messageHandlers.keys()].map((p) => [requestStreamKey(this.options.keyPrefix, p), p]),
    );
    this.cmd = this.connection('cmd');
    this.reader = this.connection('reader');
    if (this.streams.size === 0) {
      this.logger.warn('No message patterns registered; nothing to consume');
      return callback();
    }
    this.ensureGroups().then(
      () => {
        this.loops = [this.readLoop(), this.reclaimLoop()];
        callback();
      },
      (err: unknown) => callback(err),
    );
  }

  /**
   * Stops reading, lets running handlers finish for up to min(claimIdleMs / 2, 10 s), then
   * closes the connections. Requests still unanswered stay pending and are reclaimed by others.
   */
  async close(): Promise<void> {
    this.stop.abort();
    this.slotWaiters.splice(0).forEach((wake) => wake());
    this.reader?.disconnect(); // interrupts the blocking XREADGROUP
    await Promise.allSettled(this.loops);
    this.backlog = [];
    if (this.active > 0) {
      const idle = new Promise<void>((resolve) => (this.onIdle = resolve));
      await Promise.race([idle, sleep(Math.min(this.claimIdleMs / 2, 10000))]);
      this.onIdle = undefined;
    }
    this.closed = true;
    this.inFlight.clear(); // late finishers drop their replies; their entries stay pending
    const cmd = this.cmd;
    if (cmd?.status === 'ready') await cmd.quit().catch(() => cmd.disconnect());
    else cmd?.disconnect();
    this.cmd = this.reader = undefined;
    this.loops = [];
  }

  /** Registers a listener on both connections (`(type, ...args)`, type `cmd` or `reader`). */
  on<K extends string, C extends RedisStreamsEvents[K]>(event: K, callback: C): void {
    if (this.cmd && this.reader) {
      this.cmd.on(event, (...args) => callback('cmd', ...args));
      this.reader.on(event, (...args) => callback('reader', ...args));
    } else {
      this.pendingListeners.push({ event, callback });
    }
  }

  /** Returns `[commandConnection, blockingReaderConnection]`. */
  unwrap<T>(): T {
    if (!this.cmd || !this.reader) throw new Error('Not initialized: call listen() first');
    return [this.cmd, this.reader] as T;
  }

  private connection(type: 'cmd' | 'reader'): Redis {
    const name = `loom-rpc-${type}-${this.consumer}`.replace(/[^\w.:-]/g, '_');
    const redis = createConnection(this.options.redisUrl, name);
    let failing = false;
    redis.on('error', (err: Error) => {
      if (!failing) this.logger.warn(`Redis ${type} connection: ${err.message}`);
      failing = true;
    });
    redis.on('ready', () => {
      failing = false;
      this._status$.next('connected');
    });
    redis.on('reconnecting', () => this.stop.signal.aborted || this._status$.next('reconnecting'));
    for (const { event, callback } of this.pendingListeners) {
      redis.on(event, (...args) => callback(type, ...args));
    }
    return redis;
  }

  private async ensureGroups(): Promise<void> {
    if (this.groupsReady) return;
    for (const key of this.streams.keys()) {
      try {
        await this.cmd!.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
      } catch (err) {
        if (!errorMessage(err).startsWith('BUSYGROUP')) throw err;
      }
    }
    this.groupsReady = true;
  }

  private async loopFailed(loop: string, err: unknown): Promise<void> {
    if (this.stop.signal.aborted) return;
    if (errorMessage(err).includes('NOGROUP')) this.groupsReady = false;
    this.logger.warn(`${loop} loop: ${errorMessage(err)}; retrying`);
    await sleep(RETRY_DELAY_MS, this.stop.signal);
  }

  private async readLoop(): Promise<void> {
    const keys = [...this.streams.keys()];
    while (!this.stop.signal.aborted) {
      try {
        await this.ensureGroups();
        await this.waitForSlot();
        if (this.stop.signal.aborted) break;
        const reply = await this.reader!.call(
          'XREADGROUP',
          ...['GROUP', CONSUMER_GROUP, this.consumer, 'COUNT', this.freeSlots()],
          ...['BLOCK', this.blockMs, 'STREAMS', ...keys, ...keys.map(() => '>')],
        );
        for (const [key, entries] of (reply ?? []) as [string, [string, unknown][]][]) {
          for (const [entryId, fields] of entries) {
            const pattern = this.streams.get(key)!;
            this.dispatch({
              key,
              pattern,
              entryId,
              fields: fieldsToRecord(fields),
              deliveryCount: 1,
            });
          }
        }
      } catch (err) {
        await this.loopFailed('read', err);
      }
    }
  }

  private async reclaimLoop(): Promise<void> {
    while (!this.stop.signal.aborted) {
      await sleep(this.claimIdleMs / 2, this.stop.signal);
      if (this.stop.signal.aborted) break;
      try {
        await this.ensureGroups();
        await this.heartbeat();
        for (const [key, pattern] of this.streams) await this.reclaim(key, pattern);
      } catch (err) {
        await this.loopFailed('reclaim', err);
      }
    }
  }

  /** Resets the idle time of entries still running here, so live consumers keep their work. */
  private async heartbeat(): Promise<void> {
    const now = Date.now();
    const byKey = new Map<string, string[]>();
    for (const f of this.inFlight.values()) {
      if (f.abandoned || f.deadline <= now) continue; // past deadline: let it be reclaimed
      byKey.set(f.key, [...(byKey.get(f.key) ?? []), f.entryId]);
    }
    if (byKey.size === 0) return;
    const pipeline = this.cmd!.pipeline();
    for (const [key, ids] of byKey) {
      pipeline.call('XCLAIM', key, CONSUMER_GROUP, this.consumer, 0, ...ids, 'JUSTID');
    }
    await pipeline.exec();
  }

  /** Takes over entries idle longer than claimIdleMs (their consumer is presumed dead). */
  private async reclaim(key: string, pattern: string): Promise<void> {
    const free = this.freeSlots();
    if (free <= 0) return;
    const [, claimed] = (await this.cmd!.call(
      ...['XAUTOCLAIM', key, CONSUMER_GROUP, this.consumer, this.claimIdleMs, '0-0'],
      ...['COUNT', Math.min(free, RECLAIM_BATCH)],
    )) as [string, ([string, unknown] | null)[]];
    const entries = claimed.filter((e): e is [string, unknown] => Array.isArray(e));
    if (entries.length === 0) return;
    const pipeline = this.cmd!.pipeline();
    for (const [id] of entries) pipeline.call('XPENDING', key, CONSUMER_GROUP, id, id, 1);
    const pending = (await pipeline.exec()) ?? [];
    entries.forEach(([entryId, fields], i) => {
      const row = (pending[i]?.[1] as [string, string, number, number][] | undefined)?.[0];
      if (!row) return; // acked meanwhile
      const entry = {
        key,
        pattern,
        entryId,
        fields: fieldsToRecord(fields),
        deliveryCount: row[3],
      };
      const local = this.inFlight.get(`${key} ${entryId}`);
      if (entry.deliveryCount > this.maxDeliveries) {
        if (local) local.abandoned = true;
        this.settle(this.deadLetter(entry), entry);
      } else if (this.isExpired(entry)) {
        if (local) local.abandoned = true;
        this.settle(this.skipExpired(entry), entry);
      } else if (!local) {
        this.dispatch(entry);
      }
    });
  }

  private freeSlots(): number {
    return Math.max(0, this.concurrency - this.active - this.backlog.length);
  }

  private waitForSlot(): Promise<void> {
    if (this.freeSlots() > 0) return Promise.resolve();
    return new Promise((resolve) => this.slotWaiters.push(resolve));
  }

  /**
   * Runs one entry in the background, holding a concurrency slot until it ends or its deadline
   * passes (a hung handler does not block the server forever); queues it while no slot is free.
   */
  private dispatch(entry: Entry): void {
    const flightKey = `${entry.key} ${entry.entryId}`;
    const deadline = Number(entry.fields.deadline ?? Infinity);
    const flight: InFlight = { key: entry.key, entryId: entry.entryId, deadline, abandoned: false };
    this.inFlight.set(flightKey, flight); // heartbeated from now on, queued or running
    const start = (): void => {
      this.active++;
      let released = false;
      const release = (): void => {
        if (released) return;
        released = true;
        this.active--;
        const next = this.backlog.shift() ?? this.slotWaiters.shift();
        next?.();
        if (this.active === 0) this.onIdle?.();
      };
      const delay = Math.min(Math.max(0, deadline - Date.now()), 2 ** 31 - 1);
      const timer = Number.isFinite(deadline) ? setTimeout(release, delay).unref() : undefined;
      this.settle(this.process(entry, flight), entry).finally(() => {
        clearTimeout(timer);
        if (this.inFlight.get(flightKey) === flight) this.inFlight.delete(flightKey);
        release();
      });
    };
    if (this.active < this.concurrency) start();
    else this.backlog.push(start);
  }

  private settle(work: Promise<void>, entry: Entry): Promise<void> {
    return work.catch((err) => {
      if (!this.closed) {
        this.logger.error(`Entry ${entry.entryId} of ${entry.pattern}: ${errorMessage(err)}`);
      }
    });
  }

  private isExpired(entry: Entry): boolean {
    return Number(entry.fields.deadline ?? Infinity) < Date.now();
  }

  private async process(entry: Entry, flight: InFlight): Promise<void> {
    const { fields, pattern } = entry;
    if (this.isExpired(entry)) return this.skipExpired(entry);
    const ctx = new RedisStreamsContext([pattern, entry.entryId, entry.deliveryCount]);
    const data = parseJson(fields.data);
    const handler = this.getHandlerByPattern(pattern);
    if (!fields.replyTo || handler?.isEventHandler) {
      if (handler) await this.handleEvent(pattern, { pattern, data }, ctx);
      return this.finish(entry);
    }
    if (!handler) {
      return this.reply(entry, { err: NO_MESSAGE_HANDLER, isDisposed: true }, true);
    }
    if (this.options.duplicateDeliveryForTests) {
      await this.runHandler(handler, data, ctx, async () => undefined);
    }
    await this.runHandler(handler, data, ctx, (packet) =>
      flight.abandoned || this.closed
        ? Promise.resolve()
        : this.reply(entry, packet, !!packet.isDisposed),
    );
  }

  /** Calls the handler the Nest way; resolves once its last packet was written. */
  private runHandler(
    handler: MessageHandler,
    data: unknown,
    ctx: RedisStreamsContext,
    write: (packet: WritePacket) => Promise<void>,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const respond = async (packet: WritePacket): Promise<void> => {
        try {
          await write(packet);
          if (packet.isDisposed) {
            this.onProcessingEndHook?.(this.transportId!, ctx);
            resolve();
          }
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      };
      const start = async (): Promise<void> => {
        try {
          this.send(this.transformToObservable(await handler(data, ctx)), respond);
        } catch (err) {
          await respond({ err: serializeError(err), isDisposed: true });
        }
      };
      this.onProcessingStartHook(this.transportId!, ctx, start);
    });
  }

  /** Writes one reply packet; the last one is written together with XACK + XDEL. */
  private async reply(entry: Entry, packet: WritePacket, last: boolean): Promise<void> {
    await execOrThrow(this.appendReply(this.cmd!.multi(), entry, packet, last));
  }

  private appendReply(tx: Multi, entry: Entry, packet: WritePacket, last: boolean): Multi {
    const replyTo = entry.fields.replyTo;
    if (replyTo) {
      const args: string[] = ['id', entry.fields.id ?? ''];
      let err = packet.err === undefined ? undefined : serializeError(packet.err);
      if (packet.response !== undefined) {
        try {
          args.push('response', JSON.stringify(packet.response));
        } catch {
          err ??= { status: 'error', message: 'The response is not serializable' };
        }
      }
      if (err !== undefined) args.push('err', JSON.stringify(err));
      if (packet.isDisposed || last) args.push('isDisposed', '1');
      tx.xadd(replyTo, 'MAXLEN', '~', REPLY_MAXLEN, '*', ...args);
      tx.pexpire(replyTo, REPLY_TTL_MS);
    }
    if (last) {
      tx.xack(entry.key, CONSUMER_GROUP, entry.entryId);
      tx.xdel(entry.key, entry.entryId);
    }
    return tx;
  }

  private finish(entry: Entry): Promise<void> {
    return execOrThrow(
      this.cmd!.multi()
        .xack(entry.key, CONSUMER_GROUP, entry.entryId)
        .xdel(entry.key, entry.entryId),
    );
  }

  private async skipExpired(entry: Entry): Promise<void> {
    this.logger.warn(
      `Skipping request ${entry.fields.id} (${entry.pattern}, entry ${entry.entryId}): ` +
        `its deadline passed ${Date.now() - Number(entry.fields.deadline)} ms ago`,
    );
    await this.finish(entry);
  }

  private async deadLetter(entry: Entry): Promise<void> {
    const reason = `delivered ${entry.deliveryCount} times (max ${this.maxDeliveries})`;
    this.logger.error(`Dead-lettering entry ${entry.entryId} of ${entry.pattern}: ${reason}`);
    const deadKey = deadLetterStreamKey(this.options.keyPrefix, entry.pattern);
    const original = Object.entries(entry.fields).flat();
    const message = `Request ${entry.fields.id} was dead-lettered: ${reason}`;
    const tx = this.cmd!.multi().xadd(
      deadKey,
      '*',
      ...original,
      'entryId',
      entry.entryId,
      'reason',
      reason,
    );
    const packet = { err: { code: 'DEAD_LETTERED', message }, isDisposed: true };
    await execOrThrow(this.appendReply(tx, entry, packet, true));
  }
}

/** Errors as Nest sends them: the RpcException's object (or `{ status, message }`). */
function serializeError(err: unknown): unknown {
  if (err instanceof RpcException) {
    const inner = err.getError();
    return typeof inner === 'object' && inner !== null
      ? inner
      : { status: 'error', message: inner };
  }
  if (err instanceof Error) return { status: 'error', message: err.message };
  return err;
}

async function execOrThrow(tx: Multi): Promise<void> {
  const results = await tx.exec();
  const failed = results?.find(([err]) => err);
  if (failed) throw failed[0];
}
