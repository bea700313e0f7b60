import request from 'supertest';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * docs/security.md: the per-tenant limit counts every request with a valid token, on every
 * route. A request that never reaches a controller (an unknown `/v1` path, a body the parser
 * refuses) is work the orchestrator does for that tenant all the same: it must be counted, or a
 * client with a valid token floods 404s and 400s (each body read and scanned) without a 429.
 */
describe('the per-tenant rate limit counts requests that reach no route', () => {
  let orch: InProcessOrchestrator;
  const LIMIT = 3;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('rate_unrouted', {
      env: { LOOM_RATE_LIMIT_PER_MINUTE: String(LIMIT), LOOM_RATE_LIMIT_WINDOW_MS: '60000' },
    });
  });
  afterAll(() => orch?.close());

  const server = () => orch.app.getHttpServer();

  it.each([
    [
      'an unknown /v1 path',
      'tenant-unknown',
      404,
      (auth: string) => request(server()).get('/v1/nothing-here').set('authorization', auth),
    ],
    [
      'a malformed JSON body',
      'tenant-malformed',
      400,
      (auth: string) =>
        request(server())
          .post('/v1/conversations')
          .set('authorization', auth)
          .set('content-type', 'application/json')
          .send('{"conversationId": '),
    ],
    [
      'a body on an unknown path',
      'tenant-unknown-body',
      404,
      (auth: string) =>
        request(server()).post('/v1/nothing-here').set('authorization', auth).send({}),
    ],
  ])('%s: %s answers 429 once past the limit', async (_what, tenant, status, send) => {
    const auth = orch.auth('u1', tenant);
    for (let i = 0; i < LIMIT; i++) expect((await send(auth)).status).toBe(status);
    const limited = await send(auth).set('x-correlation-id', `${tenant}-limited`);
    expect([limited.status, limited.body.code]).toEqual([429, 'RATE_LIMITED']);
    expect(limited.headers['retry-after']).toBeDefined();
    expect(limited.headers['x-ratelimit-remaining']).toBe('0');
    expect(limited.headers['x-correlation-id']).toBe(`${tenant}-limited`);
    // and the tenant's routed requests are limited by the same counter
    const routed = await request(server())
      .get('/v1/agents')
      .set('authorization', auth)
      .set('x-correlation-id', `${tenant}-routed`);
    expect(routed.status).toBe(429);
    expect(routed.headers['x-correlation-id']).toBe(`${tenant}-routed`);
  });

  it('counts a routed request once, with the headers as before', async () => {
    const auth = orch.auth('u1', 'tenant-routed');
    const first = await request(server()).get('/v1/agents').set('authorization', auth);
    expect(first.status).toBe(200);
    expect(first.headers['x-ratelimit-limit']).toBe(String(LIMIT));
    expect(first.headers['x-ratelimit-remaining']).toBe(String(LIMIT - 1));
    const second = await request(server())
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({});
    expect(second.status).toBe(201);
    expect(second.headers['x-ratelimit-remaining']).toBe(String(LIMIT - 2));
  });

  it('leaves requests without a valid token to their 401 or 404, uncounted', async () => {
    const bad = 'Bearer not-a-token';
    for (let i = 0; i < LIMIT + 1; i++) {
      const res = await request(server()).get('/v1/agents').set('authorization', bad);
      expect(res.status).toBe(401);
    }
    const health = await request(server()).get('/health');
    expect(health.headers['x-ratelimit-limit']).toBeUndefined();
  });
});
