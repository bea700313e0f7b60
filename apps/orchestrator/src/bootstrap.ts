import { INestApplication, ValidationPipe } from '@nestjs/common';
import { IncomingMessage, Server, ServerResponse } from 'http';
import { Socket } from 'net';
import { NestFactory } from '@nestjs/core';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { parse as parseContentType } from 'content-type';
import { json, NextFunction, Request, Response } from 'express';
import { ClsMiddleware, ClsService } from 'nestjs-cls';
import { LoomEnv } from '@loom/agent-kit';
import { createPinoLogger, LoomClsStore, LoomLogger } from '@loom/observability';
import { assertJsonBody, MAX_JSON_DEPTH } from '@loom/security';
import { LoomError, LoomErrorCode } from '@loom/session';
import { AppModule, CLS_MIDDLEWARE } from './app.module';
import { authenticateBeforeBody } from './auth/authenticate-before-body';
import { keepEveryAuthorization } from './auth/authorization-headers';
import { AuthedRequest } from './auth/jwt-auth.guard';
import { TokenVerifier } from './auth/token-verifier';
import { HttpErrorFilter } from './errors/http-error.filter';
import { MetricsService } from './metrics/metrics.service';
import { limitConnections } from './security/connection-limit';
import { countBeforeRouting, unlessRateLimited } from './security/count-before-routing';
import { RequestLogMiddleware } from './security/request-log.middleware';
import { TenantThrottlerGuard } from './security/tenant-throttler.guard';
import { validationError } from './security/validation-error';

/**
 * Request bodies: JSON only, at most 384 KB (413 PAYLOAD_TOO_LARGE): the longest content, 32,000
 * characters, written by an encoder that escapes all but ASCII, is 32,000 surrogate pairs of 12
 * bytes each (`\ud83d\ude00`), 384,014 bytes with its braces.
 */
export const BODY_LIMIT = '384kb';
const BODY_LIMIT_BYTES = 384 * 1024;
/** Receiving a whole request (headers and body) takes at most this long: 408 after it. */
export const REQUEST_TIMEOUT_MS = 30_000;
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Names every object has through its prototype (`constructor`, `__proto__`, `toString` …). As
 * keys of a body or query they slip past the ValidationPipe's whitelist, and class-transformer
 * would set them on the DTO: refused wherever they appear.
 */
function hasPrototypeKey(value: unknown, depth = 0): boolean {
  if (value === null || typeof value !== 'object' || depth > MAX_JSON_DEPTH) return false;
  return Object.keys(value).some(
    (key) =>
      key in Object.prototype ||
      hasPrototypeKey((value as Record<string, unknown>)[key], depth + 1),
  );
}

/** Malformed HTTP, answered by Node before any route: the same error shape as everything else. */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket): void {
  // As Node's own handler decides: answer unless a response on this (keep-alive) connection has
  // already started, which an error segment would corrupt.
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const [statusCode, reason, code, message] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [
          431,
          'Request Header Fields Too Large',
          LoomErrorCode.HEADERS_TOO_LARGE,
          'request headers too large',
        ]
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [
            408,
            'Request Timeout',
            LoomErrorCode.REQUEST_TIMEOUT,
            'the request was not received in time',
          ]
        : [400, 'Bad Request', LoomErrorCode.VALIDATION_FAILED, 'malformed HTTP request'];
  answerRaw(socket, statusCode, reason, code, message);
}

/**
 * Writes a whole HTTP/1.1 error response in the API's shape on a socket no route answers on, and
 * closes the socket as lingerOnClose does: what the client still sends (the rest of a body after
 * a 431 or a 408) is read and dropped, no longer parsed (the HTTP parser, in error, would raise
 * the error again at the next bytes, and the socket was destroyed then: the client still sending
 * got a reset instead of the answer), until the client closes its side, for at most LINGER_MS and
 * LINGER_BYTES. Ending our side alone would leave the socket open for as long as the client keeps
 * its own side open, and the server's close (a graceful stop) waiting on it. A reset must not
 * become an uncaught error.
 */
function answerRaw(
  socket: Socket,
  statusCode: number,
  reason: string,
  code: LoomErrorCode,
  message: string,
  headers = '',
): void {
  const body = JSON.stringify({ statusCode, code, message });
  socket.on('error', () => socket.destroy());
  socket.write(
    `HTTP/1.1 ${statusCode} ${reason}\r\n${headers}Content-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  endLingering(socket);
}

/**
 * A chunked body declares no length. The JSON parser refuses one past the limit only once it
 * has read the rest, and a client that keeps sending would be read (and answered 408) for the
 * whole request time-out. Counted here as it arrives: past the limit, 413 at once with
 * `Connection: close`, and the connection closed as `lingerOnClose` does. The parser's own 413,
 * when it comes, finds the answer sent (HttpErrorFilter then only ends the response).
 */
function refuseOnceTooLarge(req: Request, res: Response): void {
  let received = 0;
  const count = (chunk: Buffer) => {
    received += chunk.length;
    if (received <= BODY_LIMIT_BYTES) return;
    req.off('data', count);
    if (res.headersSent) return;
    const statusCode = 413;
    res.status(statusCode).set('Connection', 'close').json({
      statusCode,
      code: LoomErrorCode.PAYLOAD_TOO_LARGE,
      message: 'request body too large',
    });
  };
  req.on('data', count);
}

/** After an answer that closes the connection, what the client still sends is read for so long… */
export const LINGER_MS = 2_000;
/** …and up to so much, then the socket is destroyed: a client streaming an endless body is cut. */
export const LINGER_BYTES = 8 * 1024 * 1024;

/**
 * An answer that closes the connection before its request's body was read (413, 401, 415, 429 …)
 * would have Node destroy the socket once it is written, the rest of the body unread: the kernel
 * then resets the connection, and a client still sending its body (or one that reads only once
 * it has sent it all, as Python's requests does) gets `EPIPE` / `ECONNRESET` instead of the
 * answer. Instead, as a lingering close: our side is ended (FIN) once the answer is written, and
 * whatever the client still sends is read and dropped, no longer parsed as HTTP, until it closes
 * its side, for at most LINGER_MS and LINGER_BYTES; then the socket is destroyed.
 */
function lingerOnClose(req: IncomingMessage, res: ServerResponse): void {
  res.once('prefinish', () => {
    if (req.complete) return;
    const socket = req.socket;
    // Node's server calls socket.destroySoon() once the last answer is written (and only then).
    socket.destroySoon = () => endLingering(socket);
  });
}

/**
 * Ends our side of `socket` (FIN once what is written has gone), reads and drops what the client
 * still sends until it closes its side, for at most LINGER_MS and LINGER_BYTES, then destroys it.
 */
function endLingering(socket: Socket): void {
  let discarded = 0;
  const timer = setTimeout(() => socket.destroy(), LINGER_MS).unref();
  socket.once('close', () => clearTimeout(timer));
  // The HTTP parser's listener off: nothing more is parsed (nor a pipelined request run).
  // Adding ours takes the socket back from the parser.
  socket.removeAllListeners('data');
  socket.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > LINGER_BYTES) socket.destroy();
  });
  socket.once('end', () => socket.destroy());
  socket.end();
  if (socket.readableEnded) socket.destroy();
  else socket.resume();
}

/**
 * CONNECT asks for a tunnel, which this server is not. Without this, Node drops the connection
 * unanswered. The socket is handed over raw, no longer the server's to time out or close.
 */
function refuseConnect(_req: IncomingMessage, socket: Socket): void {
  answerRaw(
    socket,
    405,
    'Method Not Allowed',
    LoomErrorCode.METHOD_NOT_ALLOWED,
    'CONNECT is not supported',
    'Allow: \r\n',
  );
}

/**
 * Per socket, the responses to its requests not yet closed. A socket listed with none has
 * answered every request it sent: it is idle, kept alive (or receiving its next request's
 * headers, under Node's keep-alive time-out until they are whole).
 */
const openResponses = new WeakMap<Socket, number>();

/** Counts `res` open on its socket until it closes (see onSocketTimeout). */
function trackResponse(req: IncomingMessage, res: ServerResponse): void {
  const socket = req.socket;
  openResponses.set(socket, (openResponses.get(socket) ?? 0) + 1);
  res.once('close', () => openResponses.set(socket, (openResponses.get(socket) ?? 1) - 1));
}

/**
 * The server's socket time-out (server.timeout, HTTP_SEND_TIMEOUT_MS): Node fires it once a
 * socket has neither received anything nor got a write of ours further for so long. Cut here: a
 * socket with an answer still unsent, its client no longer reading (its bytes, a page of tens of
 * MB or a stream's events, would otherwise sit in memory for as long as the client keeps the
 * connection open). Node fires it too for its keep-alive time-out, which it sets in place of
 * server.timeout once an answer is written: a socket that has answered every request it sent is
 * closed, as Node would. (Told apart by its open responses, not by its time-out's length: at
 * HTTP_SEND_TIMEOUT_MS equal to Node's keep-alive socket time-out, 6,000 ms, an idle kept-alive
 * connection was never closed.) Anything else is left alone: a request still arriving is
 * requestTimeout's (408), and a request being worked on with nothing to send yet (a turn
 * waiting for its agents) is not cut; the timer runs again from its first write.
 */
function onSocketTimeout(socket: Socket): void {
  if (socket.writableLength > 0 || openResponses.get(socket) === 0) socket.destroy();
}

/** An `Expect` other than 100-continue: Node answers 417 with no body; this is the API's shape. */
function refuseExpectation(_req: IncomingMessage, res: ServerResponse): void {
  const body = JSON.stringify({
    statusCode: 417,
    code: LoomErrorCode.VALIDATION_FAILED,
    message: 'unsupported Expect header',
  });
  res.writeHead(417, { 'Content-Type': 'application/json; charset=utf-8', Connection: 'close' });
  res.end(body);
}

/** Builds the orchestrator HTTP app (used by main.ts, the embedded launcher and the e2e tests). */
export async function createOrchestrator(env: LoomEnv): Promise<INestApplication> {
  const logger = new LoomLogger(
    createPinoLogger({ service: 'orchestrator', level: env.LOG_LEVEL, format: env.LOG_FORMAT }),
  );
  // A provider that fails (MySQL or Redis out of reach) rejects, for main's one line, instead of
  // Nest exiting the process itself after its own log line.
  const app = await NestFactory.create(AppModule.forRoot(env), {
    logger,
    bodyParser: false,
    abortOnError: false,
  });
  // Which framework answers is nobody's business (Express names itself in every response).
  app.getHttpAdapter().getInstance().disable('x-powered-by');
  const server = app.getHttpServer() as Server;
  server.on('clientError', answerClientError);
  server.on('checkExpectation', refuseExpectation);
  server.on('connect', refuseConnect);
  // Idle or slow connections, from one address or many, cannot take every file descriptor.
  const metrics = app.get(MetricsService);
  limitConnections(server, env, (bound) => metrics.connectionRefused(bound));
  // HTTP/1.1 requires a Host (RFC 9112 §3.2): refused below in the API's shape, where Node's own
  // refusal is a 400 with no body. (http.createServer's option, kept on the server, which Nest
  // creates without options.)
  (server as Server & { requireHostHeader: boolean }).requireHostHeader = false;
  // A request (headers and body) must arrive within this; Node's own default is 5 minutes, for
  // which a client trickling its body would hold a connection.
  server.requestTimeout = REQUEST_TIMEOUT_MS;
  server.headersTimeout = Math.min(server.headersTimeout, REQUEST_TIMEOUT_MS);
  // Node checks both only every connectionsCheckingInterval (30 s by default, read when the
  // server starts listening): a request trickled a byte at a time was answered 408 after up to
  // twice REQUEST_TIMEOUT_MS. Checked every second instead (one pass over the open connections).
  (server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval = 1_000;
  // An answer the client stops taking is not held for good: see onSocketTimeout.
  server.timeout = env.HTTP_SEND_TIMEOUT_MS;
  server.on('request', trackResponse);
  server.on('timeout', onSocketTimeout);
  // Before any answer: one that closes the connection lets the client read it (lingerOnClose).
  app.use((req: Request, res: Response, next: NextFunction) => {
    lingerOnClose(req, res);
    next();
  });
  // Then, before anything else: the request's CLS context (correlation id) and its access-log
  // line, so that a request any middleware below refuses is answered with its id and logged like
  // any other.
  app.use(new ClsMiddleware(CLS_MIDDLEWARE).use);
  const requestLog = app.get(RequestLogMiddleware);
  app.use((req: Request, res: Response, next: NextFunction) => requestLog.use(req, res, next));
  app.use((req: Request, res: Response, next: NextFunction) => {
    if (req.headers.host !== undefined || req.httpVersion !== '1.1') return next();
    res.setHeader('Connection', 'close');
    next(new LoomError(LoomErrorCode.VALIDATION_FAILED, 'missing Host header'));
  });
  // Two Authorization headers are not one token: every one is kept, for TokenVerifier's 401.
  app.use(keepEveryAuthorization);
  // Who sends a body is known before it is read (a 401 closes the connection instead).
  app.use(authenticateBeforeBody(app.get(TokenVerifier)));
  // Counted against the tenant's rate limit before routing: also what no route takes (404) and a
  // body the parser refuses. The body of a request past the limit is not read: it answers 429.
  app.use(countBeforeRouting(app.get(TokenVerifier), app.get(TenantThrottlerGuard)));
  // The owner a valid token named, into the request's context as the routes' guard puts it: the
  // access-log line of a request refused before any route (413, 415, 404, 429 …) names its tenant.
  const cls = app.get<ClsService<LoomClsStore>>(ClsService);
  app.use((req: Request, _res: Response, next: NextFunction) => {
    const { owner } = req as unknown as AuthedRequest;
    if (owner && cls.isActive()) {
      cls.set('tenantId', owner.tenantId);
      cls.set('userId', owner.userId);
    }
    next();
  });
  // A body the API would not read (text/plain, a form, UTF-16) is refused, not silently taken as
  // {} or decoded past the checks below, which read UTF-8. A declared length over the limit is
  // refused at once: the parser would wait for the whole body first, however long it is.
  app.use(
    unlessRateLimited((req: Request, res: Response, next: NextFunction) => {
      const length = Number(req.headers['content-length'] ?? 0);
      const hasBody = req.headers['transfer-encoding'] !== undefined || length > 0;
      if (!hasBody) return next();
      if (!req.is('application/json'))
        return next(
          new LoomError(LoomErrorCode.UNSUPPORTED_MEDIA_TYPE, 'send the body as application/json'),
        );
      const charset = parseContentType(req.headers['content-type'] ?? '').parameters.charset;
      if (charset !== undefined && !/^utf-?8$/i.test(charset))
        return next(
          new LoomError(LoomErrorCode.UNSUPPORTED_MEDIA_TYPE, 'unsupported charset (send UTF-8)'),
        );
      if (length > BODY_LIMIT_BYTES) {
        res.setHeader('Connection', 'close');
        return next(new LoomError(LoomErrorCode.PAYLOAD_TOO_LARGE, 'request body too large'));
      }
      if (req.headers['transfer-encoding'] !== undefined) refuseOnceTooLarge(req, res);
      next();
    }),
  );
  // Nesting past MAX_JSON_DEPTH is 400 VALIDATION_FAILED, and more than MAX_JSON_VALUES values
  // 413 PAYLOAD_TOO_LARGE, both checked on the raw text, in one pass, before parsing.
  app.use(
    unlessRateLimited(
      json({
        limit: BODY_LIMIT,
        verify: (_req, _res, buf) => {
          let text: string;
          try {
            // Strict: bytes that are not UTF-8 would otherwise become U+FFFD and be stored so.
            text = STRICT_UTF8.decode(buf);
          } catch {
            throw new LoomError(LoomErrorCode.VALIDATION_FAILED, 'the body is not valid UTF-8');
          }
          // Every body of the API is an object. An array would reach the ValidationPipe, which
          // sets .constructor on it, and that alone drops V8 to slow array paths process-wide.
          if (text.trimStart().startsWith('['))
            throw new LoomError(LoomErrorCode.VALIDATION_FAILED, 'the body must be a JSON object');
          assertJsonBody(text);
        },
      }),
    ),
  );
  // A body that is not JSON: a fixed message. Nest would answer with the parser's, which quotes
  // what was sent (a secret pasted by mistake, say) back and into the logs.
  app.use((err: unknown, _req: Request, _res: Response, next: NextFunction) =>
    next(
      (err as { type?: string })?.type === 'entity.parse.failed'
        ? new LoomError(LoomErrorCode.VALIDATION_FAILED, 'malformed JSON body')
        : err,
    ),
  );
  app.use((req: Request, _res: Response, next: NextFunction) => {
    if (!hasPrototypeKey(req.body) && !hasPrototypeKey(req.query)) return next();
    // Named like the ValidationPipe's unknown properties: the client's key is not echoed.
    next(new LoomError(LoomErrorCode.VALIDATION_FAILED, '(unknown property) is not allowed'));
  });
  app.useGlobalFilters(new HttpErrorFilter());
  app.useGlobalPipes(
    new ValidationPipe({
      whitelist: true,
      forbidNonWhitelisted: true,
      transform: true,
      exceptionFactory: validationError,
    }),
  );
  app.enableShutdownHooks();
  const doc = new DocumentBuilder()
    .setTitle('Loom orchestrator')
    .setVersion('0.1.0')
    .addBearerAuth()
    .build();
  SwaggerModule.setup('docs', app, SwaggerModule.createDocument(app, doc));
  return app;
}
