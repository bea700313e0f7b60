import { Server } from 'http';
import { AddressInfo, connect } from 'net';
import { REQUEST_TIMEOUT_MS } from '../src/bootstrap';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * docs/http-api.md: a request whose headers and body are not received whole within 30 s is
 * answered 408 REQUEST_TIMEOUT and its connection closed. HTTP_SEND_TIMEOUT_MS, far shorter here,
 * bounds answers the client does not read: it must not cut a request still arriving first.
 */
describe('a client slow to send its request', () => {
  let orch: InProcessOrchestrator;
  let port: number;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('slow_sender', {
      env: { HTTP_SEND_TIMEOUT_MS: '1000' },
    });
    const server = orch.app.getHttpServer() as Server;
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => orch?.close());

  /**
   * Sends `start`, then one more header byte every `gapMs` (none when 0); resolves with what the
   * server answered once it closes, and how long after connecting that was.
   */
  const trickle = (start: string, gapMs: number) =>
    new Promise<{ answer: string; ms: number }>((resolve) => {
      const t0 = Date.now();
      let answer = '';
      const socket = connect(port, '127.0.0.1', () => {
        socket.write(start);
        if (!gapMs) return;
        const more = setInterval(() => socket.writable && socket.write('x'), gapMs);
        socket.once('close', () => clearInterval(more));
      });
      socket.on('data', (d) => (answer += d.toString()));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ answer, ms: Date.now() - t0 }));
    });

  it('answers headers that stop coming 408, not a bare close', async () => {
    const { answer } = await trickle('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ', 0);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('"code":"REQUEST_TIMEOUT"');
  });

  it('answers headers trickled a byte at a time 408 once the request time-out has passed', async () => {
    const { answer, ms } = await trickle('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ', 1500);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    // The documented bound (30 s), give or take Node's check of it: not up to twice that.
    expect(ms).toBeLessThan(REQUEST_TIMEOUT_MS + 10_000);
  });
});
