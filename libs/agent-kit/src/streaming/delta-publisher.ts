import { randomBytes } from 'crypto';
import { DeltaChannel } from './delta-channel';

/**
 * One execution's `onDelta`: what the handler streams, in order, at most `maxChars` characters
 * in all (its answer can be no longer). A handler may call it for every token, thousands of
 * times in a tick: one publish is in flight at a time, and what arrives meanwhile goes out
 * together in the next, so the stream holds few entries and none is trimmed before the
 * orchestrator reads it. After `close()` (the handler settled, or was cancelled) nothing more
 * is sent.
 */
export class DeltaPublisher {
  private pending = '';
  private sent = 0;
  private inFlight: Promise<void> | null = null;
  private closed = false;
  /** This delivery of the execution: a subscriber follows one (see DeltaChannel.publish). */
  private readonly delivery = randomBytes(6).toString('hex');

  constructor(
    private readonly channel: DeltaChannel,
    private readonly conversationId: string,
    private readonly agentSessionId: string,
    private readonly maxChars: number,
    private readonly onError: (err: Error) => void,
  ) {}

  push(text: string): void {
    if (this.closed || typeof text !== 'string' || text === '') return;
    const room = this.maxChars - this.sent - this.pending.length;
    if (room <= 0) return;
    this.pending += text.length > room ? text.slice(0, room) : text;
    if (!this.inFlight) this.inFlight = this.flush();
  }

  /** Stops taking deltas; resolves once what was taken before has been published. */
  async close(): Promise<void> {
    this.closed = true;
    await this.inFlight;
  }

  private async flush(): Promise<void> {
    while (this.pending) {
      const text = this.pending;
      this.pending = '';
      this.sent += text.length;
      await this.channel
        .publish(this.conversationId, this.agentSessionId, text, this.delivery)
        .catch((err: Error) => this.onError(err));
    }
    this.inFlight = null;
  }
}
