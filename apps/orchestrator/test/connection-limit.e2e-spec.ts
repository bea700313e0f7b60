import { Server } from 'http';
import { AddressInfo, connect, Socket } from 'net';
import { parsePrometheusText, promSeries } from '@loom/testing';
import { MetricsService } from '../src/metrics/metrics.service';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** A kept-alive connection from `localAddress` (every 127.x address is this machine's loopback). */
class Client {
  private received = '';
  private closed = false;
  private waiter?: () => void;

  private constructor(readonly socket: Socket) {
    socket.on('data', (d) => {
      this.received += d.toString();
      this.waiter?.();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.closed = true;
      this.waiter?.();
    });
  }

  /** Resolves once connected, or once closed if the server drops it before that is seen. */
  static open(port: number, localAddress: string): Promise<Client> {
    return new Promise((resolve) => {
      const client = new Client(connect({ port, host: '127.0.0.1', localAddress }));
      client.socket.once('connect', () => resolve(client));
      client.socket.once('close', () => resolve(client));
    });
  }

  /**
   * Sends GET /health and resolves with the answer's status (200, or 503 should a store be slow),
   * or null when the connection closes with nothing answered.
   */
  ask(): Promise<number | null> {
    this.received = '';
    if (!this.closed) this.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    return new Promise((resolve) => {
      const check = () => {
        const end = this.received.indexOf('\r\n\r\n');
        const length = /content-length: (\d+)/i.exec(this.received);
        if (end >= 0 && length && this.received.length >= end + 4 + Number(length[1])) {
          this.waiter = undefined;
          return resolve(Number(this.received.slice(9, 12)));
        }
        if (this.closed) {
          this.waiter = undefined;
          resolve(this.received === '' ? null : -1);
        }
      };
      this.waiter = check;
      check();
    });
  }

  close(): void {
    this.socket.destroy();
  }
}

/**
 * docs/configuration.md: past HTTP_MAX_CONNECTIONS open connections, and past
 * HTTP_MAX_CONNECTIONS_PER_ADDRESS from one remote address, a new connection is closed at once,
 * unanswered; the connections already open go on being answered, and a connection that closes
 * frees its place. docs/metrics.md: loom_http_connections_refused_total counts those refused.
 */
describe('open connections: bounded in all and per remote address', () => {
  let orch: InProcessOrchestrator;
  let server: Server;
  let port: number;
  const clients: Client[] = [];
  const open = async (localAddress: string) => {
    const client = await Client.open(port, localAddress);
    clients.push(client);
    return client;
  };
  /** The server's own count of its open connections, once it has seen them close. */
  const untilServerHolds = async (count: number) => {
    for (let i = 0; i < 250; i += 1) {
      const held = await new Promise<number>((r) => server.getConnections((_e, n) => r(n)));
      if (held === count) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`the server never held ${count} connections`);
  };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('connection_limit', {
      env: { HTTP_MAX_CONNECTIONS: '4', HTTP_MAX_CONNECTIONS_PER_ADDRESS: '2' },
    });
    server = orch.app.getHttpServer() as Server;
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const client of clients) client.close();
    await orch?.close();
  });

  it('closes connections past each bound unanswered, answers the others, and frees a place on close', async () => {
    const [a, b] = [await open('127.0.0.1'), await open('127.0.0.1')];
    expect(await a.ask()).not.toBeNull();
    expect(await b.ask()).not.toBeNull();

    // A third from the same address: closed, nothing answered, twice (a refused connection's
    // close gives back no place it never held).
    expect(await (await open('127.0.0.1')).ask()).toBeNull();
    expect(await (await open('127.0.0.1')).ask()).toBeNull();
    expect(await a.ask()).not.toBeNull();
    expect(await b.ask()).not.toBeNull();

    // Other addresses still get in, up to HTTP_MAX_CONNECTIONS in all.
    const c = await open('127.0.0.2');
    const d = await open('127.0.0.3');
    expect(await c.ask()).not.toBeNull();
    expect(await d.ask()).not.toBeNull();
    expect(await (await open('127.0.0.4')).ask()).toBeNull();
    for (const client of [a, b, c, d]) expect(await client.ask()).not.toBeNull();

    // One of the first address's closes: its place is free again, for that address too.
    a.close();
    await untilServerHolds(3);
    const e = await open('127.0.0.1');
    expect(await e.ask()).not.toBeNull();
    // With room in all again, that address is still held to its two.
    c.close();
    await untilServerHolds(3);
    expect(await (await open('127.0.0.1')).ask()).toBeNull();

    // Refused unanswered, so seen by no access log: counted by the bound each was past.
    const samples = parsePrometheusText(await orch.get(MetricsService).scrape());
    expect(promSeries(samples, 'loom_http_connections_refused_total')).toEqual({
      address: 3,
      total: 1,
    });
  });
});
