import request from 'supertest';
import { InProcessOrchestrator, rawHttp, startInProcessOrchestrator } from './in-process.support';

/**
 * docs/security.md: an unauthenticated client cannot make the orchestrator receive, decode and
 * scan a request body. Routes match paths case-insensitively (`/V1/conversations` is the same
 * route as `/v1/conversations`), and every path reaches the body parser, so the check must not
 * depend on how the path is spelt, nor on whether a route takes a body at all.
 */
describe('a body is authenticated before it is read, whatever the path', () => {
  let orch: InProcessOrchestrator;
  const refused = { statusCode: 401, code: 'UNAUTHENTICATED', message: 'missing bearer token' };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('body_before_auth');
  });
  afterAll(() => orch?.close());

  it.each(['/V1/conversations', '/v1/conversations', '/nothing', '/health', '/metrics'])(
    'POST %s with a malformed body and no token: 401, the body not parsed',
    async (path) => {
      const res = await request(orch.app.getHttpServer())
        .post(path)
        .set('content-type', 'application/json')
        .send('{"conversationId": ');
      expect([res.status, res.body]).toEqual([401, refused]);
      expect(res.headers.connection).toBe('close');
    },
  );

  it('answers a large declared body on an upper-case path at once, without waiting for it', async () => {
    const answer = await rawHttp(
      orch.app,
      'POST /V1/conversations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Content-Length: 300000\r\n\r\n{"metadata":"',
    );
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer).toMatch(/\r\nConnection: close\r\n/i);
  });

  it('still reads the body of an authenticated request, however the path is spelt', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('bo', 'tenant-body');
    const lower = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({});
    expect(lower.status).toBe(201);
    const upper = await request(server)
      .post('/V1/conversations')
      .set('authorization', auth)
      .send({});
    expect(upper.status).toBe(201);
  });
});
