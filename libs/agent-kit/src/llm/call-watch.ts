import { asEventStream } from './event-stream';

/** The key under which a request's fetch options carry its progress callback. */
export const ON_PROGRESS = Symbol('loom.llm.onProgress');

/**
 * One model call's clock. Until the answer starts (a 2xx's headers) the call has until `at`,
 * retries included. From then on silence is what ends it: any byte of the answer (content,
 * reasoning, an SSE keep-alive comment) counts as progress, so a model that thinks for minutes
 * while it shows signs of life is not cut off; `maxMs` bounds the whole answer. The caller's
 * `cancel` signal (its execution was cancelled) stops the call too, at once.
 */
export class CallWatch {
  readonly at: number;
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout;
  private idle?: NodeJS.Timeout;
  private unlink = (): void => undefined;

  constructor(
    startMs: number,
    private readonly silenceMs: number,
    private readonly maxMs: number,
    cancel?: AbortSignal,
  ) {
    this.at = Date.now() + startMs;
    this.timer = setTimeout(() => this.controller.abort(), startMs);
    if (cancel?.aborted) this.controller.abort();
    else if (cancel) {
      const stop = (): void => this.controller.abort();
      cancel.addEventListener('abort', stop, { once: true });
      this.unlink = () => cancel.removeEventListener('abort', stop);
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get stopped(): boolean {
    return this.controller.signal.aborted;
  }

  /** The answer is coming (its headers, or more of its body). */
  readonly progress = (): void => {
    if (this.idle) return void this.idle.refresh();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.controller.abort(), this.maxMs);
    this.idle = setTimeout(() => this.controller.abort(), this.silenceMs);
  };

  /**
   * The answer that started failed and is asked again: until the next one starts, the call has
   * until `at` again, as before its first answer.
   */
  restart(): void {
    clearTimeout(this.timer);
    clearTimeout(this.idle);
    this.idle = undefined;
    if (this.stopped) return;
    this.timer = setTimeout(() => this.controller.abort(), Math.max(0, this.at - Date.now()));
  }

  end(): void {
    clearTimeout(this.timer);
    clearTimeout(this.idle);
    this.unlink();
  }
}

/**
 * `fetch` for the SDK: a 2xx answer reports its headers and every chunk of its body to the
 * request's ON_PROGRESS callback. The SDK's parsed chunks cannot show this: it drops SSE
 * comments, and a chunk may take long to complete. A 2xx that is no event stream is made one
 * (`asEventStream`: a whole JSON completion, or a malformed answer).
 */
export async function watchingFetch(url: string | URL | Request, init?: RequestInit) {
  const res = await fetch(url, init);
  const onProgress = (init as Record<symbol, unknown> | undefined)?.[ON_PROGRESS];
  if (!res.ok || !res.body) return res;
  if (typeof onProgress !== 'function') return asEventStream(res);
  onProgress();
  const body = res.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, out) {
        onProgress();
        out.enqueue(chunk);
      },
    }),
  );
  return asEventStream(
    new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers }),
  );
}
