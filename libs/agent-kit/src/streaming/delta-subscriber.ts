/** A stream entry as XREAD returns it: `[id, [field, value, …]]`. */
export type StreamEntry = [id: string, fields: string[]];

/** XREAD's reply: the streams that had entries, in the order they were named. */
export type XReadReply = Array<[key: string, entries: StreamEntry[]]> | null;

/**
 * One `DeltaChannel.subscribe()`: the stream it reads, how far it has read, where its deltas
 * go. Its reader reads it with one command at a time, so each entry is delivered once, in order;
 * nothing is delivered once it is closed.
 */
export class DeltaSubscriber {
  /** The last entry delivered: the next read starts after it. */
  lastId = '0';
  /** The first round of its reader sent after `stop()` was called; Infinity until then. */
  stopFrom = Infinity;
  readonly done: Promise<void>;
  private closed = false;
  private resolveDone!: () => void;
  private readonly onDelta: (text: string, delivery: string) => void;

  constructor(
    readonly key: string,
    /** Its key's hash tag (the conversation): keys that share it share a cluster slot. */
    readonly tag: string,
    onDelta: (text: string) => void,
  ) {
    this.onDelta = followOneDelivery(onDelta);
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  deliver(entries: StreamEntry[]): void {
    for (const [id, fields] of entries) {
      if (this.closed) return;
      this.lastId = id;
      try {
        this.onDelta(fields[1], fields[3] ?? '');
      } catch {
        // Its own failure: the reader goes on, for it and for every other subscriber.
      }
    }
  }

  close(): void {
    this.closed = true;
    this.resolveDone();
  }
}

/** The entries of each subscriber named in a reply (its keys named once in the command). */
export function entriesBySubscriber(
  subscribers: readonly DeltaSubscriber[],
  reply: XReadReply,
): Map<DeltaSubscriber, StreamEntry[]> {
  const byKey = new Map(subscribers.map((s) => [s.key, s]));
  const out = new Map<DeltaSubscriber, StreamEntry[]>();
  for (const [key, entries] of reply ?? []) {
    const subscriber = byKey.get(key);
    if (subscriber && entries.length) out.set(subscriber, entries);
  }
  return out;
}

/**
 * `onDelta` for the deltas of the first delivery of an execution that published any: another
 * delivery (the request run again by another instance after the first stopped or died
 * mid-answer) writes its answer from the start, and relaying it too would show the client the
 * text twice. What the followed delivery did not send comes with the stored reply.
 */
export function followOneDelivery(
  onDelta: (text: string) => void,
): (text: string, delivery: string) => void {
  let followed: string | undefined;
  return (text, delivery) => {
    followed ??= delivery;
    if (delivery === followed) onDelta(text);
  };
}
