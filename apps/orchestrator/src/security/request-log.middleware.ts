import { Injectable, Logger, NestMiddleware } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { LoomClsStore } from '@loom/observability';
import { redactPii } from '@loom/security';

interface Req {
  method: string;
  originalUrl?: string;
  url: string;
}
interface Res {
  statusCode: number;
  headersSent?: boolean;
  writableFinished?: boolean;
  on(event: 'finish' | 'close', fn: () => void): void;
}

/** Responses whose failure is expected (see `expectedFailure` in the error filter). */
const expectedFailures = new WeakSet<object>();

/** Logs this response's access-log line as a warning, not an error: its failure is no fault. */
export function markExpectedFailure(res: object): void {
  expectedFailures.add(res);
}

/**
 * One access-log line per request (what pino-http would log: `request completed`, or `request
 * aborted` when the client closed it before its answer was sent whole), written in the request's CLS
 * context when it ends, so it carries tenantId, conversationId, taskId and correlationId as far
 * as the request learnt them. The query string is dropped; the path is percent-decoded (so
 * `a%40b.com` is seen as `a@b.com`), redacted, then cut to 200 characters. Successful scrapes of
 * /metrics are left out (see unremarkable).
 */
@Injectable()
export class RequestLogMiddleware implements NestMiddleware {
  private readonly log = new Logger('HTTP');

  constructor(private readonly cls: ClsService<LoomClsStore>) {}

  use(req: Req, res: Res, next: () => void): void {
    const started = process.hrtime.bigint();
    const store = this.cls.isActive() ? this.cls.get() : undefined;
    let done = false;
    const finish = (aborted: boolean) => {
      if (done) return;
      done = true;
      // Redaction looks at a bounded prefix (a URL may be kilobytes long), wider than what is
      // kept, so nothing cut at the 200th character escaped it. Cut once decoded: an escape
      // takes up to 9 characters a character, so a cut of the raw path could fall inside the
      // 200 kept and leave half an id that no longer looks like one.
      const raw = (req.originalUrl ?? req.url).split('?')[0];
      if (unremarkable(raw, res.statusCode)) return;
      const path = redactPii(decoded(raw).slice(0, 1000)).slice(0, 200);
      const ms = Number((process.hrtime.bigint() - started) / 1000n) / 1000;
      // Closed before its answer was sent whole (the client gave up): the status it got, if any,
      // not the one the route had set for an answer it never saw.
      const entry = aborted
        ? {
            msg: 'request aborted',
            method: req.method,
            path,
            ...(res.headersSent ? { status: res.statusCode } : {}),
            ms,
          }
        : { msg: 'request completed', method: req.method, path, status: res.statusCode, ms };
      // A failure the error filter found expected (load, a shutdown's hand-over) is a warning.
      const write = () =>
        expectedFailures.has(res)
          ? this.log.warn(entry)
          : res.statusCode >= 500
            ? this.log.error(entry)
            : this.log.log(entry);
      if (store) this.cls.runWith(store, write);
      else write();
    };
    res.on('finish', () => finish(false));
    res.on('close', () => finish(res.writableFinished === false));
    next();
  }
}

/**
 * A successful Prometheus scrape: one every 15 s or so per scraper, each line saying only that
 * it worked, which the scraper's own `up` series says better. A refused one (401: a wrong or
 * missing token) or a failed one is logged like any request.
 */
export function unremarkable(path: string, status: number): boolean {
  return status < 400 && /^\/metrics\/?$/.test(path);
}

/**
 * Every run of valid `%XX` escapes decoded as UTF-8 (a bad sequence becomes U+FFFD), malformed
 * escapes left as they are, and again while that changes anything (double encoding), so no
 * encoding hides text from the redaction.
 */
export function decoded(path: string): string {
  let out = path;
  for (let pass = 0; pass < 3; pass++) {
    const next = out.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) =>
      Buffer.from(run.replace(/%/g, ''), 'hex').toString('utf8'),
    );
    if (next === out) break;
    out = next;
  }
  return out;
}
