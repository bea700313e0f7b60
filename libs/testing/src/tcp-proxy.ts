import { AddressInfo, connect, createServer, Server, Socket } from 'net';

interface Pair {
  client: Socket;
  upstream: Socket;
}

/**
 * A TCP proxy in front of a real server that a test can freeze: bytes stop moving both ways and
 * connections stay open, as when a database hangs, is partitioned away or fails over without a
 * reset. Nothing is refused or closed, so only time-outs can notice. Never frozen, it is a plain
 * port mapping (a node behind NAT) that counts what came through it.
 */
export class FreezableTcpProxy {
  private frozen = false;
  private readonly pairs = new Set<Pair>();
  /** Connections `strand()` left hanging: never thawed, only closed. */
  private readonly stranded = new Set<Pair>();
  private readonly server: Server;
  port = 0;
  /** Connections accepted so far. */
  accepted = 0;
  /** The local port of every connection it opened to the target: the target sees these clients. */
  readonly upstreamPorts = new Set<number>();
  /** Accepted connections, by their number (1 the first), that are reset at once (refuseAfter). */
  private readonly refused = new Set<number>();
  /** Text counted in what clients send (countSent), lower-cased, with its count so far. */
  private readonly counted = new Map<string, number>();

  private constructor(private target: { host: string; port: number }) {
    this.server = createServer((client) => this.accept(client));
  }

  static async start(target: { host: string; port: number }): Promise<FreezableTcpProxy> {
    const proxy = new FreezableTcpProxy(target);
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    proxy.port = (proxy.server.address() as AddressInfo).port;
    return proxy;
  }

  freeze(): void {
    this.frozen = true;
    for (const pair of this.pairs) hold(pair);
  }

  thaw(): void {
    this.frozen = false;
    for (const pair of this.pairs) flow(pair);
  }

  /**
   * Counts, from now on, the times `text` (case-insensitive: say a command, `ping`, or a query's
   * own words) occurs in what clients send through the proxy, even split between two reads;
   * returns the count so far.
   */
  countSent(text: string): () => number {
    const key = text.toLowerCase();
    this.counted.set(key, 0);
    return () => this.counted.get(key) ?? 0;
  }

  /**
   * Lets the next `passed` new connections through, then resets the `count` after them as soon as
   * they are accepted, before a byte reaches the target: a server that went down (killed, or
   * restarting) between one connection of a client and its next. Then through again.
   */
  refuseAfter(passed: number, count: number): void {
    for (let n = 1; n <= count; n++) this.refused.add(this.accepted + passed + n);
  }

  /** New connections go to `target` from now on (a name that now points at a new primary). */
  retarget(target: { host: string; port: number }): void {
    this.target = target;
  }

  /**
   * The connections open now die as when the target's host is replaced at the same address (a
   * failover, a container started again): nothing more comes back on them, and the next bytes a
   * client writes on one are answered with a reset. A client that only waits (a blocked read)
   * is never told. New connections reach the target as before.
   */
  sever(): void {
    for (const pair of [...this.pairs]) {
      this.pairs.delete(pair);
      const { client, upstream } = pair;
      client.unpipe(upstream);
      upstream.unpipe(client);
      upstream
        .removeAllListeners('close')
        .removeAllListeners('error')
        .on('error', () => {});
      upstream.destroy();
      client.removeAllListeners('close');
      client.on('data', () => client.resetAndDestroy());
      client.resume();
    }
  }

  /**
   * The connections open now are reset as soon as the target answers on them, the answer lost:
   * what a client sent has run, but it only learns that its connection was reset (a Redis
   * restart or a network reset right after a command ran). New connections reach the target as
   * before.
   */
  resetOnNextAnswer(): void {
    for (const pair of [...this.pairs]) {
      const { client, upstream } = pair;
      upstream.unpipe(client);
      upstream.once('data', () => {
        this.pairs.delete(pair);
        client.resetAndDestroy();
        upstream.destroy();
      });
      upstream.resume();
    }
  }

  /**
   * The connections open now are reset as soon as the target answers a command of theirs whose
   * request holds `command` (say `XAUTOCLAIM`), the answer lost: that command has run, and its
   * client only learns that its connection was reset. Once, on the first connection that sends it.
   */
  resetOnAnswerTo(command: string): void {
    const wanted = command.toUpperCase();
    let done = false;
    for (const pair of [...this.pairs]) {
      const { client, upstream } = pair;
      const watch = (chunk: Buffer): void => {
        if (done || !chunk.toString('latin1').toUpperCase().includes(wanted)) return;
        done = true;
        client.off('data', watch);
        upstream.unpipe(client);
        upstream.once('data', () => {
          this.pairs.delete(pair);
          client.resetAndDestroy();
          upstream.destroy();
        });
        upstream.resume();
      };
      client.on('data', watch);
    }
  }

  /**
   * Freezes the connections open now, for good, and lets new ones through: a database that
   * failed over without a reset (its old host gone, the address now leading to the new one).
   */
  strand(): void {
    for (const pair of this.pairs) {
      hold(pair);
      this.pairs.delete(pair);
      this.stranded.add(pair);
    }
  }

  /**
   * What the clients wrote on the connections `strand()` left hanging reaches the target now,
   * late (bytes held up in the network), then those connections end; answers are dropped.
   * Returns the target-side ports of those connections (see `upstreamPorts`).
   */
  deliverStranded(): number[] {
    const ports: number[] = [];
    for (const pair of [...this.stranded]) {
      this.stranded.delete(pair);
      const { client, upstream } = pair;
      ports.push(upstream.localPort!);
      client
        .removeAllListeners('close')
        .removeAllListeners('error')
        .on('error', () => {});
      upstream.on('data', () => {}).resume();
      client.pipe(upstream);
      client.resume();
    }
    return ports;
  }

  async close(): Promise<void> {
    for (const { client, upstream } of [...this.pairs, ...this.stranded]) {
      client.destroy();
      upstream.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    this.accepted++;
    if (this.refused.delete(this.accepted)) {
      client.on('error', () => {});
      client.resetAndDestroy();
      return;
    }
    const pair = { client, upstream: connect(this.target) };
    this.pairs.add(pair);
    pair.upstream.once('connect', () => this.upstreamPorts.add(pair.upstream.localPort!));
    const close = () => {
      pair.client.destroy();
      pair.upstream.destroy();
      this.pairs.delete(pair);
      this.stranded.delete(pair);
    };
    for (const socket of [pair.client, pair.upstream]) socket.on('error', close).on('close', close);
    let tail = '';
    client.on('data', (chunk: Buffer) => {
      if (!this.counted.size) return;
      const text = tail + chunk.toString('latin1').toLowerCase();
      for (const [key, n] of this.counted) {
        let found = 0;
        for (let at = text.indexOf(key); at >= 0; at = text.indexOf(key, at + key.length))
          if (at + key.length > tail.length) found++;
        this.counted.set(key, n + found);
      }
      const longest = Math.max(...[...this.counted.keys()].map((k) => k.length));
      tail = text.slice(-(longest - 1) || text.length);
    });
    if (this.frozen) hold(pair);
    else flow(pair);
  }
}

function flow({ client, upstream }: Pair): void {
  client.pipe(upstream);
  upstream.pipe(client);
}

function hold({ client, upstream }: Pair): void {
  client.unpipe(upstream);
  upstream.unpipe(client);
  client.pause();
  upstream.pause();
}
