import { BadRequestException, NotFoundException } from '@nestjs/common';
import { LoomError, LoomErrorCode } from '@loom/session';
import { retryAfterHeader, toErrorBody } from './http-error.filter';

describe('toErrorBody', () => {
  it('maps domain codes to their status', () => {
    expect(toErrorBody(new LoomError(LoomErrorCode.NOT_FOUND, 'no such conversation'))).toEqual({
      statusCode: 404,
      code: 'NOT_FOUND',
      message: 'no such conversation',
    });
  });

  it.each([
    Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    Object.assign(new Error('Deadlock found when trying to get lock'), { errno: 1213 }),
    Object.assign(new Error('Lock wait timeout exceeded'), { errno: 1205 }),
    new Error('Command timed out'),
    new Error('Connection is closed.'),
  ])('answers 503 UNAVAILABLE for a backing store out of reach or too contended: %s', (err) => {
    expect(toErrorBody(err)).toMatchObject({ statusCode: 503, code: 'UNAVAILABLE' });
  });

  it.each([LoomErrorCode.LOCK_TIMEOUT, LoomErrorCode.STALE_FENCING_TOKEN])(
    'answers %s as 409 CONFLICT, one of the documented codes',
    (code) => {
      expect(toErrorBody(new LoomError(code, 'busy'))).toEqual({
        statusCode: 409,
        code: 'CONFLICT',
        message: 'busy',
      });
    },
  );

  it('does not quote the path of a route that does not exist', () => {
    expect(toErrorBody(new NotFoundException('Cannot GET /v1/sk_live_secret'))).toEqual({
      statusCode: 404,
      code: 'NOT_FOUND',
      message: 'no such route',
    });
  });

  it('keeps HTTP exceptions 4xx with a typed code', () => {
    expect(toErrorBody(new BadRequestException('bad'))).toMatchObject({
      statusCode: 400,
      code: 'VALIDATION_FAILED',
    });
  });

  it('names every Content-Encoding the body parser takes when it refuses another', () => {
    // body-parser's refusal of `Content-Encoding: zstd`; it inflates gzip, deflate and br.
    const refused = Object.assign(new Error('unsupported content encoding "zstd"'), {
      status: 415,
      type: 'encoding.unsupported',
    });
    expect(toErrorBody(refused)).toEqual({
      statusCode: 415,
      code: 'UNSUPPORTED_MEDIA_TYPE',
      message: 'unsupported Content-Encoding (send identity, gzip, deflate or br)',
    });
  });

  it('answers 500 INTERNAL, without details, for anything else', () => {
    expect(toErrorBody(new TypeError("Cannot read properties of undefined (reading 'x')"))).toEqual(
      { statusCode: 500, code: 'INTERNAL', message: 'internal error' },
    );
  });

  it("says a 503 of a busy model provider's Retry-After (seconds), bounded", () => {
    const busy = (retryAfterS: unknown) =>
      new LoomError(LoomErrorCode.UNAVAILABLE, 'busy', { retryAfterS });
    expect(retryAfterHeader(busy(120))).toBe('120');
    expect(retryAfterHeader(busy(86_400))).toBe('3600');
    for (const odd of [0, -1, 1.5, 'soon', null, Infinity])
      expect([odd, retryAfterHeader(busy(odd))]).toEqual([odd, undefined]);
    const agentFailed = new LoomError(LoomErrorCode.AGENT_FAILED, 'x', { retryAfterS: 5 });
    expect(retryAfterHeader(agentFailed)).toBeUndefined();
  });

  it('tells a client whose conversation stayed busy past the lock wait to retry in a second', () => {
    const busy = new LoomError(LoomErrorCode.LOCK_TIMEOUT, 'the conversation is busy');
    expect([toErrorBody(busy).statusCode, retryAfterHeader(busy)]).toEqual([409, '1']);
    const superseded = new LoomError(LoomErrorCode.STALE_FENCING_TOKEN, 'superseded');
    expect(retryAfterHeader(superseded)).toBeUndefined();
  });
});
