import { randomBytes } from 'crypto';
import type Redis from 'ioredis';
import { duplicateRedis } from '@loom/session';
import { dropConnectionAndWait } from '../transport/redis-streams.util';
import { DeltaReader, DeltaRound, ENTRIES_PER_READ, MAX_KEYS_PER_READ } from './delta-reader';
import { DeltaSubscriber, entriesBySubscriber, XReadReply } from './delta-subscriber';

const WAKE_KEEP_MS = 60_000;

export interface BlockingDeltaReaderOptions {
  /** How long an XREAD blocks when nothing wakes it. */
  blockMs: number;
  connectionName: string;
}

/**
 * Standalone Redis: one connection, one blocking `XREAD BLOCK … STREAMS k1 … kn` over the streams
 * of up to MAX_KEYS_PER_READ subscribers at once. A subscriber that joins or stops while that
 * XREAD blocks wakes it through the reader's own wake stream, `<prefix>deltas:wake:<random>`,
 * which every XREAD names too: an entry added there ends the block, or, added before the XREAD
 * arrives, keeps it from blocking. (CLIENT UNBLOCK would need the reader's CLIENT ID per
 * connection, a retry when it lands before the XREAD does, and @admin rights a deployment's ACL
 * may not grant; XADD needs nothing Loom does not use already.)
 */
export class BlockingDeltaReader extends DeltaReader {
  private readonly connection: Redis;
  private readonly wakeKey: string;
  private wakeId = '0';
  /** A blocking XREAD is out, sent before the last change; whether it has been woken since. */
  private blocking = false;
  private woken = false;

  constructor(
    private readonly redis: Redis,
    prefix: string,
    private readonly options: BlockingDeltaReaderOptions,
  ) {
    super();
    this.wakeKey = `${prefix}deltas:wake:${randomBytes(8).toString('hex')}`;
    // Its commands wait while Redis is away (ioredis reconnects); a blocked one gets 2 s more
    // than its BLOCK to answer, or fails and the round is tried again.
    this.connection = duplicateRedis(redis, {
      connectionName: options.connectionName,
      enableOfflineQueue: true,
      commandTimeout: options.blockMs + 2000,
      // Not the session connection's 2 s: a blocked XREAD hears nothing for its BLOCK.
      socketTimeout: options.blockMs + 2000,
    }) as Redis;
    this.connection.on('error', () => undefined);
  }

  accepts(key: string): boolean {
    if (this.size >= MAX_KEYS_PER_READ) return false;
    for (const s of this.subscribers) if (s.key === key) return false;
    return true;
  }

  protected async read(
    subscribers: DeltaSubscriber[],
    block: boolean,
    round: number,
  ): Promise<DeltaRound> {
    const keys = [...subscribers.map((s) => s.key), this.wakeKey];
    const ids = [...subscribers.map((s) => s.lastId), this.wakeId];
    const blockArgs = block ? ['BLOCK', this.options.blockMs] : [];
    this.blocking = block;
    this.woken = false;
    try {
      const reply = (await this.connection.call(
        'XREAD',
        ...blockArgs,
        ...['COUNT', ENTRIES_PER_READ, 'STREAMS', ...keys, ...ids],
      )) as XReadReply;
      const wakes = reply?.find(([key]) => key === this.wakeKey)?.[1];
      if (wakes?.length) this.wakeId = wakes[wakes.length - 1][0];
      return {
        settled: new Map(subscribers.map((s) => [s, round])),
        entries: entriesBySubscriber(subscribers, reply),
        failed: new Set(),
      };
    } finally {
      this.blocking = false;
    }
  }

  protected pace(): number {
    return 0;
  }

  protected onChange(): void {
    if (!this.blocking || this.woken) return;
    this.woken = true;
    void this.redis
      .multi()
      .xadd(this.wakeKey, 'MAXLEN', '1', '*', 'w', '1')
      .pexpire(this.wakeKey, WAKE_KEEP_MS)
      .exec()
      // Not woken: the next change tries again, and the BLOCK ends by itself meanwhile.
      .catch(() => (this.woken = false));
  }

  protected delete(keys: string[]): Promise<unknown> {
    return this.connection.del(...keys);
  }

  protected async disconnect(): Promise<void> {
    // Not disconnect(): the socketTimeout of a read still out would hold the process open.
    await dropConnectionAndWait(this.connection);
  }
}
