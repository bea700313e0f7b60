import { Server } from 'http';
import { AddressInfo, connect, Socket } from 'net';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * Node closes an idle kept-alive connection after its keep-alive time-out (5 s, plus a second
 * of its own: its socket time-out is 6,000 ms). HTTP_SEND_TIMEOUT_MS is the socket time-out while
 * an answer is being written. Set to exactly 6,000, the two timers were the same number, and the
 * server's time-out handler, which told them apart by that number alone, took every idle
 * kept-alive connection for an answer with nothing to send yet: none was ever closed, so a
 * client could hold as many sockets as it opened, for good.
 */
describe('HTTP_SEND_TIMEOUT_MS equal to the keep-alive socket time-out', () => {
  let orch: InProcessOrchestrator;
  let port: number;
  const clients: Socket[] = [];

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('keepalive_send', {
      env: { HTTP_SEND_TIMEOUT_MS: '6000' },
    });
    const server = orch.app.getHttpServer() as Server;
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const socket of clients) socket.destroy();
    await orch?.close();
  });

  it('still closes an idle kept-alive connection', async () => {
    const closedByServer = await new Promise<boolean>((resolve) => {
      let answer = '';
      const socket = connect(port, '127.0.0.1', () =>
        socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'),
      );
      clients.push(socket);
      socket.on('data', (d) => (answer += d.toString()));
      socket.on('error', () => undefined);
      // Only so that a failure does not hang the suite: five times the keep-alive time-out.
      const timer = setTimeout(() => resolve(false), 30_000);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve(/^HTTP\/1\.1 200 /.test(answer));
      });
    });
    expect(closedByServer).toBe(true);
  });
});
