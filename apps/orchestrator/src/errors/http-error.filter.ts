import {
  ArgumentsHost,
  Catch,
  ExceptionFilter,
  HttpException,
  Logger,
  NotFoundException,
} from '@nestjs/common';
import { Request, Response } from 'express';
import { STATUS_CODES } from 'http';
import {
  isConnectionError,
  isContentionError,
  isPoolQueueFull,
  isRedisUnavailable,
  LoomError,
  LoomErrorCode,
} from '@loom/session';
import { isShutdownRefusal } from '../lifecycle/shutdown-refusal';
import { rateLimitRefusal } from '../security/count-before-routing';
import { markExpectedFailure } from '../security/request-log.middleware';

const STATUS: Record<string, number> = {
  [LoomErrorCode.UNAUTHENTICATED]: 401,
  [LoomErrorCode.VALIDATION_FAILED]: 400,
  [LoomErrorCode.INVALID_ID]: 400,
  [LoomErrorCode.NOT_FOUND]: 404,
  [LoomErrorCode.PAYLOAD_TOO_LARGE]: 413,
  [LoomErrorCode.CONFLICT]: 409,
  [LoomErrorCode.METHOD_NOT_ALLOWED]: 405,
  [LoomErrorCode.UNSUPPORTED_MEDIA_TYPE]: 415,
  [LoomErrorCode.LOCK_TIMEOUT]: 409,
  [LoomErrorCode.STALE_FENCING_TOKEN]: 409,
  [LoomErrorCode.RATE_LIMITED]: 429,
  [LoomErrorCode.UNAVAILABLE]: 503,
  [LoomErrorCode.TIMEOUT]: 503,
  [LoomErrorCode.AGENT_FAILED]: 502,
  [LoomErrorCode.DEAD_LETTERED]: 502,
};

const HTTP_CODE: Record<number, LoomErrorCode> = {
  400: LoomErrorCode.VALIDATION_FAILED,
  401: LoomErrorCode.UNAUTHENTICATED,
  404: LoomErrorCode.NOT_FOUND,
  413: LoomErrorCode.PAYLOAD_TOO_LARGE,
  415: LoomErrorCode.UNSUPPORTED_MEDIA_TYPE,
  429: LoomErrorCode.RATE_LIMITED,
  503: LoomErrorCode.UNAVAILABLE,
};

/** The one place codes become HTTP: `{ statusCode, code, message }`, never a stack or a secret. */
@Catch()
export class HttpErrorFilter implements ExceptionFilter {
  private readonly log = new Logger('HttpErrorFilter');

  catch(err: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<Response>();
    // A request past its tenant's rate limit that no route took (a 404): its 429.
    err = rateLimitRefusal(host.switchToHttp().getRequest<object>()) ?? err;
    let { statusCode, code, message } = toErrorBody(err);
    const allowed = isRouteMiss(err) ? allowedMethods(host.switchToHttp().getRequest()) : [];
    if (allowed.length) {
      res.setHeader('Allow', allowed.join(', '));
      [statusCode, code] = [405, LoomErrorCode.METHOD_NOT_ALLOWED];
      message = `method not allowed; allowed: ${allowed.join(', ')}`;
    }
    const retryAfter = retryAfterHeader(err);
    if (expectedFailure(err)) {
      this.log.warn(`${statusCode} ${code}: ${message}`);
      markExpectedFailure(res);
    } else if (statusCode >= 500) this.log.error(err instanceof Error ? err : String(err));
    if (res.headersSent) return void res.end();
    if (retryAfter) res.setHeader('Retry-After', retryAfter);
    res.status(statusCode).json({ statusCode, code, message });
  }
}

/**
 * A failure that is no fault, logged as a warning (the error filter's line, the access log's and
 * a streamed turn's): a refusal that says when to retry (a full orchestrator, a busy provider) is
 * load, and a turn handed over because this orchestrator is stopping is a deploy. Any other 5xx
 * is logged as an error.
 */
export function expectedFailure(err: unknown): boolean {
  return retryAfterHeader(err) !== undefined || isShutdownRefusal(err);
}

/** The longest Retry-After Loom passes on (seconds): a provider's hint past it is not kept. */
const MAX_RETRY_AFTER_S = 3600;

/**
 * The Retry-After (seconds) of a refusal worth retrying that says when (`details.retryAfterS`,
 * checked here, at most an hour): a 503 whose model provider was busy and said how long to wait,
 * or of an orchestrator holding all the turns it takes; a 409 of a conversation busy with other
 * turns, or busy past the lock wait (1 s). So that the client does not retry at once; undefined for any other error (a 502 is not
 * worth a retry, whatever its provider said).
 */
export function retryAfterHeader(err: unknown): string | undefined {
  // Another turn held the conversation through the whole lock wait: it may end any moment.
  if (LoomError.is(err, LoomErrorCode.LOCK_TIMEOUT)) return '1';
  if (!LoomError.is(err, LoomErrorCode.UNAVAILABLE) && !LoomError.is(err, LoomErrorCode.CONFLICT))
    return undefined;
  const seconds = err.details?.retryAfterS;
  if (typeof seconds !== 'number' || !Number.isSafeInteger(seconds) || seconds < 1)
    return undefined;
  return String(Math.min(seconds, MAX_RETRY_AFTER_S));
}

/**
 * Internal codes that clients see as one of API.md's: a busy conversation (another turn holds
 * the lock) and a superseded turn (its fencing token is stale) are both CONFLICT, worth a retry.
 */
const PUBLIC_CODE: Partial<Record<string, LoomErrorCode>> = {
  [LoomErrorCode.LOCK_TIMEOUT]: LoomErrorCode.CONFLICT,
  [LoomErrorCode.STALE_FENCING_TOKEN]: LoomErrorCode.CONFLICT,
};

export function toErrorBody(err: unknown): { statusCode: number; code: string; message: string } {
  if (LoomError.is(err))
    return {
      statusCode: STATUS[err.code] ?? 500,
      code: PUBLIC_CODE[err.code] ?? err.code,
      message: err.message,
    };
  if (err instanceof HttpException) {
    const statusCode = err.getStatus();
    const body = err.getResponse() as { code?: string; message?: string | string[] } | string;
    const message =
      typeof body === 'string'
        ? body
        : Array.isArray(body.message)
          ? body.message.join('; ')
          : (body.message ?? err.message);
    // Nest's route-not-found message quotes the path: answer without it.
    if (isRouteMiss(err))
      return { statusCode, code: LoomErrorCode.NOT_FOUND, message: 'no such route' };
    // Express could not percent-decode a path parameter (an id): Nest's message quotes it.
    if (statusCode === 400 && message.startsWith('Failed to decode param'))
      return { statusCode, code: LoomErrorCode.INVALID_ID, message: 'malformed id in the path' };
    if (typeof body === 'object' && body.code) return { statusCode, code: body.code, message };
    // Another library's exception: its own words may quote the request, so only the status's.
    const code =
      HTTP_CODE[statusCode] ??
      (statusCode >= 500 ? LoomErrorCode.INTERNAL : LoomErrorCode.VALIDATION_FAILED);
    return { statusCode, code, message: (STATUS_CODES[statusCode] ?? 'error').toLowerCase() };
  }
  // The stores map these themselves; this catches any that reach the edge another way. A
  // backing store out of reach, too slow or too contended is never the request's fault: 503.
  if (
    isConnectionError(err) ||
    isPoolQueueFull(err) ||
    isContentionError(err) ||
    isRedisUnavailable(err)
  )
    return {
      statusCode: 503,
      code: LoomErrorCode.UNAVAILABLE,
      message: 'a backing store is unavailable',
    };
  const e = err as { type?: string; status?: number };
  if (e?.type === 'entity.too.large')
    return {
      statusCode: 413,
      code: LoomErrorCode.PAYLOAD_TOO_LARGE,
      message: 'request body too large',
    };
  if (e?.type === 'entity.parse.failed')
    return {
      statusCode: 400,
      code: LoomErrorCode.VALIDATION_FAILED,
      message: 'malformed JSON body',
    };
  if (e?.status && e.status >= 400 && e.status < 500)
    return {
      statusCode: e.status,
      code: HTTP_CODE[e.status] ?? LoomErrorCode.VALIDATION_FAILED,
      message: PARSER_MESSAGE[e.type ?? ''] ?? 'bad request',
    };
  return { statusCode: 500, code: LoomErrorCode.INTERNAL, message: 'internal error' };
}

/** body-parser's refusals, in words that quote nothing sent. */
const PARSER_MESSAGE: Record<string, string> = {
  'encoding.unsupported': 'unsupported Content-Encoding (send identity, gzip, deflate or br)',
  'charset.unsupported': 'unsupported charset (send UTF-8)',
  'request.aborted': 'the request body was cut short',
  'request.size.invalid': 'the body is not as long as its Content-Length',
};

/** Nest's answer to a request no route matched ("Cannot GET /x"). */
function isRouteMiss(err: unknown): boolean {
  return err instanceof NotFoundException && /^Cannot [A-Z]+ /.test(err.message);
}

interface RouterLayer {
  route?: { methods: Record<string, boolean> };
  match(path: string): unknown;
}

/** The methods the routes matching this path answer (none: the path itself is unknown). */
export function allowedMethods(req: Request): string[] {
  const stack = (req.app as unknown as { router?: { stack?: RouterLayer[] } } | undefined)?.router
    ?.stack;
  const methods = new Set<string>();
  for (const layer of stack ?? [])
    if (layer.route && layer.match(req.path))
      for (const [method, on] of Object.entries(layer.route.methods))
        if (on && method !== '_all') methods.add(method.toUpperCase());
  if (methods.has('GET')) methods.add('HEAD');
  return [...methods].sort();
}
