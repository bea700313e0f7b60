import { EventEmitter } from 'events';
import { duplicateRedis, RedisClient } from '@loom/session';

/** The embedded profile runs every app in one process: deltas go through memory there. */
const local = new EventEmitter().setMaxListeners(0);
const BLOCK_MS = 500;
const KEEP_MS = 60_000;

export interface DeltaSubscription {
  stop(): Promise<void>;
}

/**
 * Carries an agent's reply text, as the model produces it, to the orchestrator replica that
 * streams it to the user (SSE). One short-lived Redis stream per execution,
 * `<prefix>deltas:{<conversationId>}:<agentSessionId>`, deleted once read to the end (else it
 * expires a minute after its last delta).
 * Deltas are a preview: the stored reply, sent in the final `done` event, is authoritative.
 */
export class DeltaChannel {
  constructor(
    private readonly redis: RedisClient | null,
    private readonly prefix: string,
  ) {}

  async publish(conversationId: string, agentSessionId: string, text: string): Promise<void> {
    const key = this.key(conversationId, agentSessionId);
    if (!this.redis) {
      local.emit(key, text);
      return;
    }
    await this.redis
      .multi()
      // Not trimmed: a trimmed stream would lose text the orchestrator has not read yet.
      // DeltaPublisher bounds it (one entry per round trip, the answer's length in all).
      .xadd(key, '*', 't', text)
      .pexpire(key, KEEP_MS)
      .exec();
  }

  /** Calls `onDelta` for every delta of the execution, in order, until `stop()`. */
  subscribe(
    conversationId: string,
    agentSessionId: string,
    onDelta: (text: string) => void,
  ): DeltaSubscription {
    const key = this.key(conversationId, agentSessionId);
    if (!this.redis) {
      local.on(key, onDelta);
      return { stop: async () => void local.off(key, onDelta) };
    }
    const reader = duplicateRedis(this.redis, {
      enableOfflineQueue: true,
      commandTimeout: BLOCK_MS * 4,
    });
    reader.on('error', () => undefined);
    let stopped = false;
    let lastId = '0';
    const drain = async (block: boolean) => {
      const args: Array<string | number> = block ? ['BLOCK', BLOCK_MS] : [];
      const res = (await (reader as any).xread(...args, 'STREAMS', key, lastId)) as Array<
        [string, Array<[string, string[]]>]
      > | null;
      for (const [id, fields] of res?.[0]?.[1] ?? []) {
        lastId = id;
        onDelta(fields[1]);
      }
      return (res?.[0]?.[1]?.length ?? 0) > 0;
    };
    const loop = (async () => {
      while (!stopped) await drain(true).catch(() => new Promise((r) => setTimeout(r, 100)));
      // The execution has answered: everything it published is in the stream by now.
      while (await drain(false).catch(() => false));
    })();
    return {
      stop: async () => {
        stopped = true;
        await loop;
        // Read to the end: the reply text goes with it now, not a minute later (a conversation
        // deleted meanwhile keeps nothing in Redis).
        await reader.del(key).catch(() => undefined);
        reader.disconnect();
      },
    };
  }

  private key(conversationId: string, agentSessionId: string): string {
    return `${this.prefix}deltas:{${conversationId}}:${agentSessionId}`;
  }
}
