import { AsyncResource } from 'async_hooks';
import { EventEmitter } from 'events';
import { outsideMdc } from '@loom/observability';
import { isCluster, RedisClient } from '@loom/session';
import { BlockingDeltaReader } from './blocking-delta-reader';
import { DeltaReader } from './delta-reader';
import { DeltaSubscriber, followOneDelivery } from './delta-subscriber';
import { PolledDeltaReader } from './polled-delta-reader';

/** The embedded profile runs every app in one process: deltas go through memory there. */
const local = new EventEmitter().setMaxListeners(0);
const KEEP_MS = 60_000;
/** Woken by every subscribe and stop, a standalone reader's BLOCK ends early when it must. */
const BLOCK_MS = 2000;
const POLL_MS = 25;

export interface DeltaSubscription {
  stop(): Promise<void>;
}

export interface DeltaChannelOptions {
  /** Standalone: how long the readers' XREAD blocks when nothing wakes it (2 s). */
  blockMs?: number;
  /** Cluster: how often the reader reads every stream (25 ms). */
  pollMs?: number;
  /** CLIENT SETNAME of the readers' connections (`loom-deltas`). */
  connectionName?: string;
}

/**
 * Carries an agent's reply text, as the model produces it, to the orchestrator replica that
 * streams it to the user (SSE). One short-lived Redis stream per execution,
 * `<prefix>deltas:{<conversationId>}:<agentSessionId>`, deleted once read to the end (else it
 * expires a minute after its last delta). A process reads all of its subscriptions through a few
 * shared connections: standalone, one blocking XREAD per MAX_KEYS_PER_READ subscriptions; on a
 * cluster, one Cluster client polled every POLL_MS (see the readers).
 * Deltas are a preview: the stored reply, sent in the final `done` event, is authoritative.
 */
export class DeltaChannel {
  private readonly readers: DeltaReader[] = [];
  private closed = false;

  constructor(
    private readonly redis: RedisClient | null,
    private readonly prefix: string,
    private readonly options: DeltaChannelOptions = {},
  ) {}

  /**
   * `delivery`: which delivery of the execution wrote it (DeltaPublisher's own id). A request
   * delivered again (its agent stopped or died mid-answer, and another instance runs it) writes
   * its answer from the start into the same stream: a subscriber follows one delivery only.
   */
  async publish(
    conversationId: string,
    agentSessionId: string,
    text: string,
    delivery = '',
  ): Promise<void> {
    const key = this.key(conversationId, agentSessionId);
    if (!this.redis) {
      local.emit(key, text, delivery);
      return;
    }
    await this.redis
      .multi()
      // Not trimmed: a trimmed stream would lose text the orchestrator has not read yet.
      // DeltaPublisher bounds it (one entry per round trip, the answer's length in all).
      .xadd(key, '*', 't', text, 'd', delivery)
      .pexpire(key, KEEP_MS)
      .exec();
  }

  /**
   * Calls `onDelta` for every delta of the execution, in order, until `stop()` (of the delivery
   * that published first: see `publish`); `stop()` (the
   * execution has answered) delivers what is left, deletes the stream, then resolves. Every
   * subscription of this channel is read by its shared readers (DeltaReader), not by a
   * connection of its own.
   */
  subscribe(
    conversationId: string,
    agentSessionId: string,
    onDelta: (text: string) => void,
  ): DeltaSubscription {
    const key = this.key(conversationId, agentSessionId);
    // Called by a reader every turn shares (or, in memory, by the publishing agent): in the
    // context of the turn that subscribed, its correlation id and tenant, not theirs.
    const relay = AsyncResource.bind(onDelta);
    if (!this.redis) {
      const follow = followOneDelivery(relay);
      local.on(key, follow);
      return { stop: async () => void local.off(key, follow) };
    }
    // Closed (the app is stopping): no reader opens again; the stored reply still comes in `done`.
    if (this.closed) return { stop: async () => undefined };
    const subscriber = new DeltaSubscriber(key, conversationId, relay);
    const redis = this.redis;
    const reader =
      this.readers.find((r) => r.accepts(key)) ?? outsideMdc(() => this.openReader(redis));
    // Its first add() starts the reader's loop, which reads for every turn from then on.
    outsideMdc(() => reader.add(subscriber));
    return { stop: () => reader.stop(subscriber) };
  }

  /** Closes the readers (stop()s still pending resolve at once); subscribe() relays nothing after. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.readers.splice(0).map((reader) => reader.close()));
  }

  /**
   * Opened at the first subscription (outside that turn's context: it reads for every turn) and kept (a reader idle between turns costs one idle
   * connection; closing it would bring back a connection, or a cluster's topology, per turn).
   */
  private openReader(redis: RedisClient): DeltaReader {
    const connectionName = this.options.connectionName ?? 'loom-deltas';
    const reader = isCluster(redis)
      ? new PolledDeltaReader(redis, { pollMs: this.options.pollMs ?? POLL_MS, connectionName })
      : new BlockingDeltaReader(redis, this.prefix, {
          blockMs: this.options.blockMs ?? BLOCK_MS,
          connectionName,
        });
    this.readers.push(reader);
    return reader;
  }

  private key(conversationId: string, agentSessionId: string): string {
    return `${this.prefix}deltas:{${conversationId}}:${agentSessionId}`;
  }
}
