import { request as httpRequest } from 'http';
import { AddressInfo, connect } from 'net';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * docs/security.md: a body past 384 KB is answered 413 PAYLOAD_TOO_LARGE before it is read to its
 * end, and the connection closed. A client that is still sending its body when the answer comes
 * (every ordinary client: curl, fetch, axios write the body and read the answer afterwards or
 * alongside) must get to read that answer: closing the socket with the rest of its body unread
 * makes the kernel reset the connection, and the client sees `write EPIPE` / `ECONNRESET`
 * instead of the 413 and its code.
 */
describe('a body too large: the client still sending it reads the 413', () => {
  let orch: InProcessOrchestrator;
  let port: number;
  let auth: string;
  const chunk = Buffer.alloc(64 * 1024, 'x');
  const tooLarge = {
    statusCode: 413,
    code: 'PAYLOAD_TOO_LARGE',
    message: 'request body too large',
  };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('too_large');
    const server = orch.app.getHttpServer();
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    auth = orch.auth('tl', 'tenant-too-large');
  });
  afterAll(() => orch?.close());

  /**
   * Sends `chunks` chunks of 64 KB as an HTTP client does (node:http, under axios), each after
   * the last was written and `gapMs` later, without stopping when the answer comes; resolves with
   * the answer, rejects with the client's error.
   */
  const send = (headers: Record<string, string>, chunks: number, gapMs: number) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/v1/conversations',
        headers: { authorization: auth, 'content-type': 'application/json', ...headers },
      });
      req.on('error', reject);
      req.on('response', (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      });
      let sent = 0;
      const more = () => {
        if (req.destroyed) return;
        if (sent === chunks) return void req.end();
        sent += 1;
        req.write(chunk, () => setTimeout(more, gapMs));
      };
      more();
    });

  /**
   * A client that writes its whole request before reading the answer (as Python's requests
   * does): a body of `chunks` chunks of 64 KB, `gapMs` apart, chunked (then the closing chunk)
   * or of that length declared; only then does it read. Resolves with what it read, rejects
   * with its socket's error.
   */
  const sendThenRead = (chunks: number, gapMs: number, framing: 'chunked' | 'declared') =>
    new Promise<string>((resolve, reject) => {
      let answer = '';
      const socket = connect(port, '127.0.0.1', () => {
        socket.pause();
        socket.write(
          `POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n` +
            'Content-Type: application/json\r\n' +
            (framing === 'chunked'
              ? 'Transfer-Encoding: chunked\r\n\r\n'
              : `Content-Length: ${chunks * chunk.length}\r\n\r\n`),
        );
        const frame = (data: Buffer | string) =>
          framing === 'chunked' ? `${data.length.toString(16)}\r\n${data}\r\n` : data;
        let sent = 0;
        const more = () => {
          if (socket.destroyed) return;
          if (sent === chunks) return void socket.write(frame(''), () => socket.resume());
          sent += 1;
          socket.write(frame(chunk), () => setTimeout(more, gapMs));
        };
        more();
      });
      socket.on('data', (d) => (answer += d.toString()));
      socket.on('end', () => resolve(answer));
      socket.on('error', reject);
      socket.setTimeout(10_000, () => socket.destroy(new Error('no answer in 10 s')));
    });

  it('chunked, sent slowly past the limit and read only then: 413 with its code, not EPIPE', async () => {
    // 384 KB is 6 chunks: the answer comes at the 7th; 10 more follow, 10 ms apart.
    const answer = await sendThenRead(16, 10, 'chunked');
    expect(answer).toMatch(/^HTTP\/1\.1 413 [\s\S]*\r\nConnection: close\r\n/i);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual(tooLarge);
  });

  it('a declared length past the limit, sent and read only then: 413 with its code, not EPIPE', async () => {
    const answer = await sendThenRead(16, 10, 'declared');
    expect(answer).toMatch(/^HTTP\/1\.1 413 [\s\S]*\r\nConnection: close\r\n/i);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual(tooLarge);
  });

  it('chunked, sent as fast as the socket takes it: 413 with its code, not a reset', async () => {
    const res = await send({ 'transfer-encoding': 'chunked' }, 64, 0);
    expect([res.status, JSON.parse(res.body)]).toEqual([413, tooLarge]);
  });

  it('a declared length past the limit, the body sent anyway: 413 with its code', async () => {
    const res = await send({ 'content-length': String(32 * chunk.length) }, 32, 5);
    expect([res.status, JSON.parse(res.body)]).toEqual([413, tooLarge]);
  });

  it('fetch streaming a large body: 413 with its code', async () => {
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (sent++ === 32) return controller.close();
        await new Promise((r) => setTimeout(r, 10));
        controller.enqueue(chunk);
      },
    });
    const res = await fetch(`http://127.0.0.1:${port}/v1/conversations`, {
      method: 'POST',
      headers: { authorization: auth, 'content-type': 'application/json' },
      body,
      duplex: 'half',
    } as RequestInit);
    expect([res.status, await res.json()]).toEqual([413, tooLarge]);
  });

  /**
   * A client that never ends its chunked body, even once answered: `chunks` chunks at most,
   * `gapMs` apart, reading as it goes; then, if still connected, `then` is written. Resolves with what it read, how
   * many chunks it had sent when the server closed, and whether it was the server that did.
   */
  const endless = (chunks: number, gapMs: number, then = '') =>
    new Promise<{ answer: string; sent: number; cut: boolean }>((resolve) => {
      let answer = '';
      let sent = 0;
      let done = false;
      // allowHalfOpen: the server's FIN after its answer does not stop this client sending.
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => {
        socket.write(
          `POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n` +
            'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
        );
        const more = () => {
          if (socket.destroyed || socket.writableEnded) return;
          if (sent === chunks) {
            done = true;
            return void (then ? socket.end(then) : socket.destroy());
          }
          sent += 1;
          socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`, () =>
            gapMs ? setTimeout(more, gapMs) : setImmediate(more),
          );
        };
        more();
      });
      socket.on('data', (d) => (answer += d.toString()));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ answer, sent, cut: !done }));
    });

  it('a body that never ends is still cut: by time for a slow one, by size for a fast one', async () => {
    // 200 chunks 50 ms apart would take 10 s; the server stops reading well before.
    const slow = await endless(200, 50);
    expect(slow.answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(slow).toMatchObject({ cut: true });
    expect(slow.sent).toBeLessThan(200);
    // 1,024 chunks of 64 KB is 64 MB, far past what is read after the answer.
    const fast = await endless(1024, 0);
    expect(fast.answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(fast).toMatchObject({ cut: true });
    expect(fast.sent).toBeLessThan(1024);
  });

  it('a request sent after the refused body on the same connection is not read', async () => {
    const pipelinedAuth = orch.auth('tl', 'tenant-pipelined');
    const next =
      '0\r\n\r\n' +
      `POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: ${pipelinedAuth}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}';
    const res = await endless(8, 0, next);
    expect(res.answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(res.answer.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    // Not answered, and not run either: a request parsed would create the conversation even
    // with no socket to answer on. Given the time a request run would take to be stored.
    await new Promise((r) => setTimeout(r, 500));
    const list = await fetch(`http://127.0.0.1:${port}/v1/conversations`, {
      headers: { authorization: pipelinedAuth },
    });
    expect([list.status, ((await list.json()) as { items: unknown[] }).items]).toEqual([200, []]);
  });
});
