import { Logger } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { Writable } from 'stream';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { redactPii } from '@loom/security';
import { decoded, RequestLogMiddleware, unremarkable } from './request-log.middleware';

/** The access-log lines the middleware writes for a request to `url` answered with `status`. */
function accessLog(url: string, status: number): string[] {
  let out = '';
  const destination = new Writable({
    write(chunk, _enc, done) {
      out += chunk.toString();
      done();
    },
  });
  Logger.overrideLogger(
    new LoomLogger(
      createPinoLogger({ service: 'orchestrator', level: 'info', format: 'json', destination }),
    ),
  );
  const cls = { isActive: () => false } as unknown as ClsService;
  const handlers: Array<() => void> = [];
  const res = { statusCode: status, on: (_event: string, fn: () => void) => handlers.push(fn) };
  new RequestLogMiddleware(cls).use({ method: 'GET', url }, res, () => undefined);
  handlers.forEach((fn) => fn());
  return out.split('\n').filter(Boolean);
}

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

describe('the access log line of a long path', () => {
  // Percent-encoded text takes up to 9 characters a character (a Chinese one, `%E4%B8%AD`): a
  // path cut before it is decoded may cut a resident id in two well inside the 200 characters
  // kept, and the half left no longer looks like one to the redaction.
  it('keeps no part of a resident id that a cut of the raw path split', () => {
    const id = '11010519491231002X';
    const url = `/v1/conversations/${'%E4%B8%AD'.repeat(107)}//${id}`;
    const [line] = accessLog(url, 400);
    expect(JSON.parse(line)).toMatchObject({ msg: 'request completed', status: 400 });
    expect(line).not.toContain(id.slice(0, 12));
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
