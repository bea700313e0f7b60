import { client, RunningSystem, startSystem } from './system';

/**
 * Per-tenant rate limiting against a private, tiny limit (5 requests per 3 s) on an
 * orchestrator of its own, so no other suite is throttled.
 */
describe('system: per-tenant rate limit (@nestjs/throttler on Redis)', () => {
  let sys: RunningSystem;

  beforeAll(async () => {
    sys = await startSystem({
      without: ['contract-law-agent', 'labor-law-agent', 'legal-research-agent'],
      env: { LOOM_RATE_LIMIT_PER_MINUTE: '5', LOOM_RATE_LIMIT_WINDOW_MS: '3000' },
    });
  });
  afterAll(() => sys?.stop());

  it('answers the request past the limit with 429 RATE_LIMITED, Retry-After and the X-RateLimit headers, per tenant, until the window ends', async () => {
    const r = client(sys.base, sys.token('tenant-r', 'u1'));
    const sameTenant = client(sys.base, sys.token('tenant-r', 'u2'));
    const other = client(sys.base, sys.token('tenant-s', 'u1'));
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await r('GET', '/v1/conversations')).status);
    // the limit is the tenant's, across users and routes
    statuses.push((await sameTenant('GET', '/v1/agents')).status);
    const fifth = await r('POST', '/v1/conversations', {});
    statuses.push(fifth.status);
    expect(statuses).toEqual([200, 200, 200, 200, 201]);
    expect(fifth.headers.get('x-ratelimit-limit')).toBe('5');
    expect(fifth.headers.get('x-ratelimit-remaining')).toBe('0');

    const limited = await r('GET', '/v1/conversations');
    expect(limited.status).toBe(429);
    expect(limited.body).toEqual({
      statusCode: 429,
      code: 'RATE_LIMITED',
      message: expect.stringContaining('rate limit'),
    });
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(3);
    expect(limited.headers.get('x-ratelimit-limit')).toBe('5');
    expect(limited.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(limited.headers.get('x-ratelimit-reset')).toBe(String(retryAfter));
    expect((await sameTenant('GET', '/v1/conversations')).status).toBe(429);

    // another tenant is not affected; neither are unauthenticated requests (401 first)
    expect((await other('GET', '/v1/conversations')).status).toBe(200);
    expect((await client(sys.base, null)('GET', '/v1/conversations')).status).toBe(401);
    expect((await client(sys.base, null)('GET', '/health')).status).toBe(200);

    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 300));
    expect((await r('GET', '/v1/conversations')).status).toBe(200);
  });
});
