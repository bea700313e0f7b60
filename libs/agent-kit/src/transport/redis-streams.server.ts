import { Logger } from '@nestjs/common';
import {
  CustomTransportStrategy,
  MessageHandler,
  Server,
  WritePacket,
} from '@nestjs/microservices';
import { NO_MESSAGE_HANDLER } from '@nestjs/microservices/constants';
import { randomBytes } from 'crypto';
import { hostname } from 'os';
import { performance } from 'perf_hooks';
import { pickMdc, runWithMdc } from '@loom/observability';
import { isCluster, RedisClient, SharedClock } from '@loom/session';
import { RedisStreamsContext } from './redis-streams.context';
import {
  Entry,
  appendFinish,
  appendProgress,
  deadlineOf,
  execOrThrow,
  isExpired,
  isStale,
  landedLate,
  progressMsOf,
  requeueEntry,
  replyToOf,
  serializeError,
  scrubDeadLetterData,
  startByOf,
  trimDeadLetters,
  writeDeadLetter,
  writeReply,
} from './redis-streams.entries';
import {
  DEFAULTS,
  REDIS_STREAMS_TRANSPORT,
  HandlerCancelled,
  RedisStreamsOptions,
  WITHHELD_CODE,
  deadLetterStreamKey,
  requestStreamKey,
} from './redis-streams.options';
import { ConsumerGroup } from './redis-streams.group';
import { ProgressBeat, firstProgressDelay } from './redis-streams.progress';
import { Slots } from './redis-streams.slots';
import {
  PendingListener,
  RedisStreamsEvents,
  closeConnection,
  dropConnection,
  createConnection,
  errorMessage,
  listenOnBoth,
  onReconnected,
  parseJson,
  sleep,
  unwrapBoth,
} from './redis-streams.util';

interface InFlight {
  entry: Entry;
  /** Set when the entry was dead-lettered or skipped behind the handler's back: drop its reply. */
  abandoned: boolean;
  /** Reports progress to the caller while the handler runs (callers that ask for it). */
  beat?: ProgressBeat;
  /** Aborts the handler's signal (its context's `getSignal()`) when the server gives up on it. */
  cancel: AbortController;
}

/** Nothing more is sent for this entry: no reply, no progress; its handler is told to stop. */
function abandon(flight: InFlight): void {
  flight.abandoned = true;
  flight.beat?.stop();
  flight.cancel.abort(new HandlerCancelled('deadline'));
}

const RETRY_DELAY_MS = 500;
const RECLAIM_BATCH = 100;
/** How long close() waits for each step that needs Redis (the loops to stop, leaving the groups). */
const CLOSE_STEP_MS = 2000;
/** How often, at most, the reclaim loop trims the dead-letter streams (or every retention). */
const DEAD_TRIM_EVERY_MS = 60_000;
/** How often listen() tries to create the consumer groups (about 15 s in all). */
const START_ATTEMPTS = 20;

/**
 * Waits for `work`, but no longer than `ms`; the wait ends with it, so a close that returns
 * leaves no timer holding the process open.
 */
async function within(work: Promise<unknown>, ms: number): Promise<unknown> {
  const over = new AbortController();
  try {
    return await Promise.race([work, sleep(ms, over.signal)]);
  } finally {
    over.abort();
  }
}

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
  private readonly claimIdleMs: number;
  private readonly slots: Slots;
  private cmd?: RedisClient;
  /** The time requests' deadlines are written and checked on (Redis's, on `cmd`). */
  private clock = new SharedClock(null);
  /** The blocking readers: one for every stream on a cluster (no XREADGROUP spans slots). */
  private readers: RedisClient[] = [];
  private streams = new Map<string, string>(); // stream key -> pattern
  private group?: ConsumerGroup;
  private groupsReady = false;
  private stop = new AbortController();
  private closed = false;
  /** Set once close() is past its drain: replies are dropped, entries left pending for others. */
  private answering = true;
  /** Set once close() stopped waiting for the loops: what they bring in later is left pending. */
  private loopsAbandoned = false;
  private loops: Promise<void>[] = [];
  /** When the reclaim loop last trimmed the dead-letter streams (performance.now()). */
  private deadTrimmedAt?: number;
  /** Dead-letter streams rid of older versions' copies with the request's data since listen(). */
  private readonly deadScrubbed = new Set<string>();
  private readonly inFlight = new Map<string, InFlight>(); // `${key} ${entryId}`, queued or running
  private listeners: PendingListener[] = [];

  constructor(private readonly options: RedisStreamsOptions) {
    super();
    this.transportId = REDIS_STREAMS_TRANSPORT;
    this.consumer =
      options.consumerName ?? `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;
    this.claimIdleMs = options.claimIdleMs ?? DEFAULTS.claimIdleMs;
    this.slots = new Slots(Math.max(1, options.concurrency ?? DEFAULTS.concurrency));
  }

  /** Creates the consumer groups (stream read from `0`), then starts the read and reclaim loops. */
  listen(callback: (...optionalParams: unknown[]) => any): void {
    this.stop = new AbortController();
    this.closed = false;
    this.answering = true;
    this.loopsAbandoned = false;
    this.deadTrimmedAt = undefined;
    this.deadScrubbed.clear();
    const { keyPrefix } = this.options;
    const patterns = [...this.messageHandlers.keys()];
    this.streams = new Map(patterns.map((p) => [requestStreamKey(keyPrefix, p), p]));
    this.group = new ConsumerGroup(this.consumer, this.streams);
    this.groupsReady = false;
    this.cmd = this.connection('cmd');
    this.clock = new SharedClock(this.cmd);
    // Standalone: one XREADGROUP over every stream, as always. A cluster refuses one across
    // slots, so each stream gets its own blocking reader there (an entry of one stream never
    // waits for another's BLOCK to end); they share the slots, and what they fetch past them
    // goes back to its stream (readLoop).
    const keys = [...this.streams.keys()];
    const readGroups = isCluster(this.cmd) && keys.length > 1 ? keys.map((k) => [k]) : [keys];
    this.readers = readGroups.map((_, i) => this.connection('reader', i));
    // A reclaim (XAUTOCLAIM) whose answer a reset lost is sent again, and that copy finds
    // nothing (the first one reset their idle time): the look-back runs what it took over.
    // On a cluster, after a reset of one master's connection too (see onReconnected).
    onReconnected(this.cmd, () => readGroups.forEach((group) => void this.lookBack(group)));
    if (this.streams.size === 0) return callback();
    Promise.all([this.startGroups(), this.clock.sync()]).then(() => {
      this.loops = [
        ...readGroups.map((group, i) => this.readLoop(this.readers[i], group)),
        this.reclaimLoop(),
      ];
      callback();
    }, callback);
  }

  /**
   * Stops reading, lets running handlers finish for up to min(claimIdleMs / 2, 10 s), then
   * aborts the signals of those still running and gives them up to 2 s more to wind down (say
   * what they were doing, let go of what they hold) before it closes the connections. Requests
   * still unanswered stay pending and are reclaimed by others; their late replies are dropped.
   */
  async close(): Promise<void> {
    this.stop.abort();
    this.slots.wakeAll();
    this.readers.forEach((reader) => dropConnection(reader)); // interrupts the blocking XREADGROUP
    // With Redis away, a loop's command waits in ioredis's offline queue for as long as Redis
    // stays away: a close must not (the process would never exit, nor leave the registry).
    // Closing the command connection below fails whatever is still queued.
    await within(Promise.allSettled(this.loops), CLOSE_STEP_MS);
    this.loopsAbandoned = true;
    await this.slots.drain(Math.min(this.claimIdleMs / 2, 10000));
    // Those still running are told to stop, and given a moment to let go of what they hold
    // (their progress goes on meanwhile: they are alive). What they answer is dropped.
    this.answering = false;
    const running = [...this.inFlight.values()];
    running.forEach((flight) => flight.cancel.abort(new HandlerCancelled('closing')));
    if (running.length) await this.slots.drain(CLOSE_STEP_MS);
    this.closed = true;
    // Late finishers drop their replies, and report no progress: their entries stay pending,
    // and their callers give up on them unless another instance takes them over.
    this.inFlight.forEach((flight) => flight.beat?.stop());
    this.inFlight.clear();
    // Each start is a new consumer: leave the groups, where nothing is pending on us. Without
    // Redis the consumer stays; the next reclaim by another instance forgets it (idle, empty).
    if (this.groupsReady && this.cmd?.status === 'ready')
      await within(
        this.group!.leave(this.cmd).catch((err) =>
          this.logger.warn(`leaving the consumer groups: ${errorMessage(err)}`),
        ),
        CLOSE_STEP_MS,
      );
    await closeConnection(this.cmd);
    this.cmd = undefined;
    this.readers = [];
    this.loops = [];
  }

  /** Registers a listener on both connections (`(type, ...args)`, type `cmd` or `reader`). */
  on<K extends string, C extends RedisStreamsEvents[K]>(event: K, callback: C): void {
    listenOnBoth(this.cmd, this.readers, this.listeners, event, callback);
  }

  /** Returns `[commandConnection, blockingReaderConnection]`. */
  unwrap<T>(): T {
    return unwrapBoth<T>(this.cmd, this.readers[0], 'listen');
  }

  /** The `n`th connection of its type (readers past the first: a cluster's other streams). */
  private connection(type: 'cmd' | 'reader', n = 0): RedisClient {
    const {
      redisUrl: url,
      redisClusterNodes: clusterNodes,
      redisClusterNatMap: natMap,
    } = this.options;
    const name = `loom-rpc-${type}${n || ''}-${this.consumer}`;
    return createConnection({ url, clusterNodes, natMap }, name, {
      type,
      logger: this.logger,
      listeners: this.listeners,
      status: (status) => this.stop.signal.aborted || this._status$.next(status),
      blockMs: type === 'reader' ? (this.options.blockMs ?? DEFAULTS.blockMs) : undefined,
      commandTimeoutMs: this.options.commandTimeoutMs,
    });
  }

  /**
   * The consumer groups at start, tried again for about 15 s while a stream's master is briefly
   * away (a cluster answers CLUSTERDOWN or redirects while a restarted master rejoins), rather
   * than fail the start: the app would exit.
   */
  private async startGroups(): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.ensureGroups();
      } catch (err) {
        if (attempt >= START_ATTEMPTS || this.stop.signal.aborted) throw err;
        this.logger.warn(`creating the consumer groups: ${errorMessage(err)}; retrying`);
        await sleep(Math.min(100 * attempt, 1000), this.stop.signal);
      }
    }
  }

  private async ensureGroups(): Promise<void> {
    if (this.groupsReady) return;
    await this.group!.create(this.cmd!);
    this.groupsReady = true;
  }

  /** Runs `step` until close(); errors (Redis down, NOGROUP after FLUSHALL…) are logged and retried. */
  private async loop(name: string, step: () => Promise<void>): Promise<void> {
    while (!this.stop.signal.aborted) {
      try {
        await this.ensureGroups();
        await step();
      } catch (err) {
        if (this.stop.signal.aborted) break;
        if (errorMessage(err).includes('NOGROUP')) this.groupsReady = false;
        this.logger.warn(`${name} loop: ${errorMessage(err)}; retrying`);
        await sleep(RETRY_DELAY_MS, this.stop.signal);
      }
    }
  }

  private readLoop(reader: RedisClient, keys: string[]): Promise<void> {
    const blockMs = this.options.blockMs ?? DEFAULTS.blockMs;
    // Once the reader has connected again, what is pending on us is looked at (see lookBack):
    // on a cluster, once its connection to a master has (see onReconnected).
    onReconnected(reader, () => void this.lookBack(keys));
    return this.loop('read', async () => {
      await this.slots.wait();
      // The reclaim loop may have taken the slot between the wait and now; and XREADGROUP reads
      // `COUNT 0` as no limit at all: wait again instead.
      const free = this.slots.free();
      if (this.stop.signal.aborted || free <= 0) return;
      const entries = await this.group!.readNew(reader, keys, free, blockMs);
      // close() stopped waiting for this read: what it brought stays pending for others.
      if (this.loopsAbandoned) return;
      // A read asks for the slots free when it was sent, but others may have filled them while
      // it blocked: the reclaim loop (what it took over from a dead instance), a cluster's other
      // readers (one per stream, each asking for every free slot). What it brings beyond the
      // slots goes back to its stream as a new entry, for any server, rather than wait here
      // (kept alive) while another server idles and its caller gives up.
      for (const entry of entries) {
        // A look-back on the command connection may have seen it pending on us first.
        if (this.inFlight.has(`${entry.key} ${entry.entryId}`)) continue;
        if (this.slots.free() > 0 || !(await this.requeue(entry))) this.dispatch(entry);
      }
    });
  }

  /**
   * Runs what was delivered to us and runs nowhere here, after a reader or the command
   * connection connected again: ioredis sends again a read (or an XAUTOCLAIM) whose answer a
   * reset lost, and that copy finds nothing new, while what the lost one delivered sits pending
   * on us, unrun; left to the reclaim loop it waited claimIdleMs, by when its callers had given
   * up. One read of our pending entries on the command connection (the reader is blocked in
   * ioredis' copy); best effort: what it misses is reclaimed as before.
   */
  private async lookBack(keys: string[]): Promise<void> {
    if (!this.groupsReady || !this.cmd || this.stop.signal.aborted) return;
    const free = this.slots.free();
    if (free <= 0) return;
    const pending = await this.group!.readOwnPending(this.cmd, keys, free).catch((err) => {
      this.logger.warn(`reading our pending entries: ${errorMessage(err)}`);
      return [];
    });
    if (this.loopsAbandoned) return;
    const maxDeliveries = this.options.maxDeliveries ?? DEFAULTS.maxDeliveries;
    for (const entry of pending) {
      if (this.inFlight.has(`${entry.key} ${entry.entryId}`)) continue;
      // As the reclaim loop does: one delivered too often is not run again anywhere.
      if (entry.deliveryCount > maxDeliveries) {
        const reason = `delivered ${entry.deliveryCount} times (max ${maxDeliveries})`;
        void this.settle(this.deadLetter(entry, reason), entry);
      } else if (this.slots.free() > 0) this.dispatch(entry);
    }
  }

  /** Every claimIdleMs / 2: keeps our own entries alive, takes over those of dead consumers. */
  private reclaimLoop(): Promise<void> {
    const maxDeliveries = this.options.maxDeliveries ?? DEFAULTS.maxDeliveries;
    return this.loop('reclaim', async () => {
      await sleep(this.claimIdleMs / 2, this.stop.signal);
      if (this.stop.signal.aborted) return;
      // Entries past their deadline are no longer kept alive: they get reclaimed and skipped.
      const held = [...this.inFlight.values()].filter(
        (f) => !f.abandoned && !isExpired(f.entry, this.clock.now()),
      );
      await this.group!.touch(
        this.cmd!,
        held.map((f) => f.entry),
      );
      await this.group!.forgetIdle(
        this.cmd!,
        this.options.forgetConsumersAfterMs ?? DEFAULTS.forgetConsumersAfterMs,
      );
      await this.trimDeadLetters();
      for (const key of this.streams.keys()) {
        const free = this.slots.free();
        if (free <= 0 || this.stop.signal.aborted) return;
        const count = Math.min(free, RECLAIM_BATCH);
        const claimed = await this.group!.claimIdle(this.cmd!, key, this.claimIdleMs, count);
        // A claim answered after close() stopped waiting: another instance reclaims it later.
        if (this.loopsAbandoned) return;
        for (const entry of claimed) {
          const local = this.inFlight.get(`${key} ${entry.entryId}`);
          if (entry.deliveryCount > maxDeliveries) {
            if (local) abandon(local);
            const reason = `delivered ${entry.deliveryCount} times (max ${maxDeliveries})`;
            void this.settle(this.deadLetter(entry, reason), entry);
          } else if (isExpired(entry, this.clock.now())) {
            if (local) abandon(local);
            void this.settle(this.skipExpired(entry), entry);
          } else if (!local && this.slots.free() > 0) {
            this.dispatch(entry);
          }
          // Else, unless we run it already: the claim asked for the slots free when it was sent,
          // and the read loop has filled them since. Not run nor kept alive here, it is reclaimed
          // (one more delivery) by whichever server next has a slot, rather than wait behind our
          // running handlers while its caller gives up.
        }
      }
    });
  }

  /**
   * Runs an entry in a slot, held until it ends or its deadline passes (hung handlers: the
   * caller has given up by then, so they report no more progress either, and their signal
   * aborts).
   */
  private dispatch(entry: Entry): void {
    if (this.loopsAbandoned) return; // closed: it stays pending, for another instance
    const flightKey = `${entry.key} ${entry.entryId}`;
    const flight: InFlight = { entry, abandoned: false, cancel: new AbortController() };
    this.inFlight.set(flightKey, flight); // heartbeated from now on
    this.slots.run(async (release) => {
      const delay = Math.min(Math.max(0, deadlineOf(entry) - this.clock.now()), 2 ** 31 - 1);
      const expire = (): void => {
        flight.beat?.stop();
        flight.cancel.abort(new HandlerCancelled('deadline'));
        release();
      };
      const timer = Number.isFinite(deadlineOf(entry)) ? setTimeout(expire, delay) : undefined;
      timer?.unref();
      await this.settle(this.process(flight), entry);
      flight.beat?.stop();
      clearTimeout(timer);
      if (this.inFlight.get(flightKey) === flight) this.inFlight.delete(flightKey);
    });
  }

  private settle(work: Promise<void>, entry: Entry): Promise<void> {
    return work.catch((err) => {
      if (this.closed) return;
      // Outside the execution's context (it has ended, or never began): the request's own id.
      inRequestContext(entry, () =>
        this.logger.error(`Entry ${entry.entryId} of ${entry.pattern}: ${errorMessage(err)}`),
      );
    });
  }

  private async process(flight: InFlight): Promise<void> {
    const { entry } = flight;
    const { fields, pattern } = entry;
    if (isStale(entry, this.clock.now())) return this.skipExpired(entry);
    const ctx = new RedisStreamsContext([
      pattern,
      entry.entryId,
      entry.deliveryCount,
      flight.cancel.signal,
    ]);
    const handler = this.getHandlerByPattern(pattern);
    if (fields.replyTo && !replyToOf(entry))
      return this.deadLetter(entry, 'its replyTo is not a reply stream of this transport');
    const maxChars = this.options.maxRequestChars ?? DEFAULTS.maxRequestChars;
    if (tooLarge(entry, maxChars)) return this.refuseTooLarge(entry, maxChars);
    const data = parseJson(fields.data);
    if (!fields.replyTo || handler?.isEventHandler) {
      if (handler) await this.handleEvent(pattern, { pattern, data }, ctx);
      return execOrThrow(appendFinish(this.cmd!.multi(), entry));
    }
    // Each packet is named (a token of this delivery, its rank): the caller drops one it has had.
    const token = randomBytes(4).toString('hex');
    let sent = 0;
    const write = (packet: WritePacket, last: boolean): Promise<void> =>
      flight.abandoned || !this.answering || this.closed || withheld(packet)
        ? Promise.resolve()
        : writeReply(this.cmd!, entry, packet, last, `${token}.${++sent}`);
    if (!handler) return write({ err: NO_MESSAGE_HANDLER, isDisposed: true }, true);
    flight.beat = this.progressBeat(flight);
    if (this.options.duplicateDeliveryForTests) {
      await this.runHandler(handler, data, ctx, async () => undefined);
    }
    await this.runHandler(handler, data, ctx, (packet) => write(packet, !!packet.isDisposed));
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
          if (!packet.isDisposed) return;
          this.onProcessingEndHook?.(this.transportId!, ctx);
          resolve();
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

  /**
   * Tells the caller, every `progressMs` it asked for, that the handler still runs in a live
   * process: its wait is then bounded by the request's deadline, not by its silence bound.
   */
  private progressBeat(flight: InFlight): ProgressBeat | undefined {
    const { entry } = flight;
    const intervalMs = progressMsOf(entry);
    if (!intervalMs || !replyToOf(entry)) return undefined;
    const firstMs = firstProgressDelay(this.clock.now(), startByOf(entry), intervalMs);
    return new ProgressBeat(intervalMs, firstMs, () =>
      flight.abandoned || this.closed || isExpired(entry, this.clock.now())
        ? Promise.resolve()
        : appendProgress(this.cmd!.pipeline(), entry).exec(),
    );
  }

  /**
   * Puts a delivered entry this server cannot run now back in its stream as a new, undelivered
   * entry (one script in the stream's slot: XACK, XDEL, the copy, once: see requeueEntry). False
   * when Redis refused: it then waits here for a slot.
   */
  private async requeue(entry: Entry): Promise<boolean> {
    return requeueEntry(this.cmd!, entry).then(
      () => true,
      () => false,
    );
  }

  private async skipExpired(entry: Entry): Promise<void> {
    const now = this.clock.now();
    const late = now - (isExpired(entry, now) ? deadlineOf(entry) : startByOf(entry));
    const why =
      !isExpired(entry, now) && landedLate(entry)
        ? 'it reached Redis after its sending had failed'
        : `its caller stopped waiting ${late} ms ago`;
    inRequestContext(entry, () =>
      this.logger.warn(
        `Skipping request ${entry.fields.id} (${entry.pattern}, entry ${entry.entryId}): ${why}`,
      ),
    );
    await execOrThrow(appendFinish(this.cmd!.multi(), entry));
  }

  /**
   * A request too large to parse: answered PAYLOAD_TOO_LARGE (an event just dropped), its entry
   * finished, so no redelivery brings it back to this or another instance.
   */
  private async refuseTooLarge(entry: Entry, maxChars: number): Promise<void> {
    const message = `the request is ${entry.fields.data!.length} characters, over the limit of ${maxChars}`;
    inRequestContext(entry, () =>
      this.logger.warn(
        `Refusing request ${entry.fields.id} (${entry.pattern}, entry ${entry.entryId}): ${message}`,
      ),
    );
    if (!replyToOf(entry)) return execOrThrow(appendFinish(this.cmd!.multi(), entry));
    const packet = { err: { code: 'PAYLOAD_TOO_LARGE', message }, isDisposed: true };
    return this.answering && !this.closed ? writeReply(this.cmd!, entry, packet, true) : undefined;
  }

  private async deadLetter(entry: Entry, reason: string): Promise<void> {
    inRequestContext(entry, () =>
      this.logger.error(`Dead-lettering entry ${entry.entryId} of ${entry.pattern}: ${reason}`),
    );
    const deadKey = deadLetterStreamKey(this.options.keyPrefix, entry.pattern);
    await writeDeadLetter(this.cmd!, entry, deadKey, reason, this.deadLetterRetentionMs());
  }

  private deadLetterRetentionMs(): number {
    return this.options.deadLetterRetentionMs ?? DEFAULTS.deadLetterRetentionMs;
  }

  /**
   * Every minute (or every retention, when shorter), from the reclaim loop: drops the copies our
   * patterns' dead-letter streams got longer than the retention ago, which no dead-lettering
   * comes to trim in a quiet week, and has each stream expire with its newest copy (trimmed on
   * no instance once the type stops for good). One command per stream, in its slot; off the
   * dispatch path. The first round after listen() also deletes the copies older versions wrote
   * with the request's data (scrubDeadLetterData): a DELETE of the conversation removed that
   * everywhere else. A stream that fails is logged and tried again next round, the others
   * trimmed all the same: a round that failed is a round, so a stream that keeps failing (a key
   * of another type) writes a line a round, not one every reclaim pass.
   */
  private async trimDeadLetters(): Promise<void> {
    const retentionMs = this.deadLetterRetentionMs();
    const every = Math.min(DEAD_TRIM_EVERY_MS, retentionMs);
    const now = performance.now();
    if (this.deadTrimmedAt !== undefined && now - this.deadTrimmedAt < every) return;
    this.deadTrimmedAt = now;
    for (const pattern of this.streams.values()) {
      const deadKey = deadLetterStreamKey(this.options.keyPrefix, pattern);
      try {
        if (!this.deadScrubbed.has(deadKey)) {
          const scrubbed = await scrubDeadLetterData(this.cmd!, deadKey);
          if (scrubbed)
            this.logger.warn(
              `Deleted ${scrubbed} dead-letter copies of ${pattern} that an earlier version wrote with the request's data`,
            );
          this.deadScrubbed.add(deadKey);
        }
        await trimDeadLetters(this.cmd!, deadKey, retentionMs);
      } catch (err) {
        this.logger.warn(`trimming the dead-letter stream of ${pattern}: ${errorMessage(err)}`);
      }
    }
  }
}

/**
 * Runs `fn` (a line logged about an entry outside its execution: skipped, dead-lettered, its
 * reply or finish not written) in a log context holding the request's correlation id, taken from
 * its `meta` when well-formed as AgentContextInterceptor takes it, so the line is found by the
 * turn's id.
 */
function inRequestContext(entry: Entry, fn: () => void): void {
  // One too large to parse is logged without its correlation id.
  const data = tooLarge(entry, DEFAULTS.maxRequestChars)
    ? undefined
    : (parseJson(entry.fields.data) as { meta?: unknown } | undefined);
  const { correlationId } = pickMdc(data?.meta);
  if (correlationId) runWithMdc({ correlationId }, fn);
  else fn();
}

/** A superseded delivery's error: its entry belongs to the delivery that took the work over. */
function withheld(packet: WritePacket): boolean {
  const err = packet.err === undefined ? undefined : serializeError(packet.err);
  return (err as { code?: unknown } | undefined)?.code === WITHHELD_CODE;
}

/** Whether the entry's `data` is longer than `maxChars`. */
function tooLarge(entry: Entry, maxChars: number): boolean {
  return (entry.fields.data?.length ?? 0) > maxChars;
}
