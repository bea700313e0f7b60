import { redactPii } from '@loom/security';
import { decoded, unremarkable } from './request-log.middleware';

describe('the access log path', () => {
  it.each([
    ['/v1/conversations/john.doe%40example.com', '/v1/conversations/john.doe@example.com'],
    ['/v1/conversations/john.doe%40example.com%', '/v1/conversations/john.doe@example.com%'],
    ['/v1/x/john.doe%40example.com%E0%A4%A', '/v1/x/john.doe@example.com\uFFFD%A'],
    ['/v1/x/john.doe%2540example.com', '/v1/x/john.doe@example.com'],
    ['/v1/%E4%B8%AD%E6%96%87', '/v1/中文'],
    ['/v1/plain', '/v1/plain'],
  ])('decodes %s whatever else it holds', (raw, expected) => {
    expect(decoded(raw)).toBe(expected);
  });

  it('leaves no email for the log to carry, however it was encoded', () => {
    for (const raw of [
      '/v1/c/a.b%40example.com%',
      '/v1/c/a.b%2540example.com',
      '/v1/c/a.b@example.com',
    ])
      expect(redactPii(decoded(raw))).not.toContain('a.b');
  });
});

describe('the access log of /metrics', () => {
  it('leaves out successful scrapes only', () => {
    expect(unremarkable('/metrics', 200)).toBe(true);
    expect(unremarkable('/metrics/', 200)).toBe(true);
    expect(unremarkable('/metrics', 401)).toBe(false);
    expect(unremarkable('/metrics', 500)).toBe(false);
    expect(unremarkable('/health', 200)).toBe(false);
    expect(unremarkable('/v1/metrics', 200)).toBe(false);
    expect(unremarkable('/metrics/x', 200)).toBe(false);
  });
});
