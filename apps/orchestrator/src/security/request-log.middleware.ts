import { Injectable, Logger, NestMiddleware } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { LoomClsStore } from '@loom/observability';

interface Req {
  method: string;
  originalUrl?: string;
  url: string;
}
interface Res {
  statusCode: number;
  on(event: 'finish' | 'close', fn: () => void): void;
}

/**
 * One access-log line per request (what pino-http would log), written in the request's CLS
 * context when it ends, so it carries tenantId, conversationId, taskId and correlationId as far
 * as the request learnt them. The path is cut to 200 characters and the query string dropped;
 * it is logged percent-decoded, so the logger's PII redaction sees `a%40b.com` as `a@b.com`.
 */
@Injectable()
export class RequestLogMiddleware implements NestMiddleware {
  private readonly log = new Logger('HTTP');

  constructor(private readonly cls: ClsService<LoomClsStore>) {}

  use(req: Req, res: Res, next: () => void): void {
    const started = process.hrtime.bigint();
    const store = this.cls.isActive() ? this.cls.get() : undefined;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      const path = decoded((req.originalUrl ?? req.url).split('?')[0]).slice(0, 200);
      const entry = {
        msg: 'request completed',
        method: req.method,
        path,
        status: res.statusCode,
        ms: Number((process.hrtime.bigint() - started) / 1000n) / 1000,
      };
      const write = () => (res.statusCode >= 500 ? this.log.error(entry) : this.log.log(entry));
      if (store) this.cls.runWith(store, write);
      else write();
    };
    res.on('finish', finish);
    res.on('close', finish);
    next();
  }
}

function decoded(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    return path; // malformed escapes: as sent
  }
}
