import { InProcessOrchestrator, rawHttp, startInProcessOrchestrator } from './in-process.support';

/**
 * Authorization is a single field (RFC 9110 §11.6.2): a request with two is malformed. Node keeps
 * the first and drops the rest unseen, while a proxy or gateway in front may act on the last, so
 * the two would disagree on whose request it is. Loom answers it 401, whichever tokens it holds.
 */
describe('a request with more than one Authorization header', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('auth_headers');
  });
  afterAll(() => orch?.close());

  const refused =
    /^HTTP\/1\.1 401 [^]*"code":"UNAUTHENTICATED","message":"more than one Authorization header"/;

  it('is refused with 401, with a body or without', async () => {
    const alice = orch.auth('alice', 'tenant-a');
    const mallory = orch.auth('mallory', 'tenant-b');
    const get = await rawHttp(
      orch.app,
      'GET /v1/conversations HTTP/1.1\r\nHost: x\r\n' +
        `Authorization: ${alice}\r\nAuthorization: ${mallory}\r\nConnection: close\r\n\r\n`,
    );
    expect(get).toMatch(refused);
    const body = '{}';
    const post = await rawHttp(
      orch.app,
      'POST /v1/conversations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        `Content-Length: ${body.length}\r\nAuthorization: ${alice}\r\n` +
        `authorization: ${alice}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(post).toMatch(refused);
    // one of them alone is answered as before
    const one = await rawHttp(
      orch.app,
      `GET /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: ${alice}\r\nConnection: close\r\n\r\n`,
    );
    expect(one).toMatch(/^HTTP\/1\.1 200 /);
  });
});
