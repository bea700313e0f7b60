import { createServer, IncomingMessage, Server, ServerResponse } from 'http';
import { AddressInfo } from 'net';

/** One chat completion request as the server received it. */
export interface ReceivedCompletion {
  authorization: string | undefined;
  model: string;
  stream: boolean;
  includeUsage: boolean;
  messages: Array<{ role: string; content: string }>;
  body: Record<string, unknown>;
}

/** What the server answers to one request. */
export interface FakeAnswer {
  /** The completion text; streamed in `chunks` pieces (default: split into 3). */
  text?: string;
  chunks?: string[];
  /** Reported usage; omitted from the answer when null. */
  usage?: { prompt_tokens: number; completion_tokens: number } | null;
  /** An error answer instead: this status with OpenAI's error body. */
  status?: number;
  /** The error body's message (default: `fake failure <status>` and the Authorization sent). */
  errorMessage?: string;
  /** The error body's `param` and `code`, as OpenAI names the request field it refused. */
  errorParam?: string;
  errorCode?: string;
  headers?: Record<string, string>;
  /** Waits this long before answering (before the first chunk when streaming). */
  delayMs?: number;
  /** Streaming: the pause before each chunk (default: none). */
  chunkIntervalMs?: number;
  /** Streaming: the connection is cut after this many chunks. */
  cutAfterChunks?: number;
  /**
   * Sends the headers (and, streaming, this many chunks) and then nothing more, the connection
   * left open: a provider that hangs mid-answer.
   */
  stallAfterChunks?: number;
  /** The choice's `finish_reason` (default `stop`); `length` when the model hit its token limit. */
  finishReason?: string | null;
  /**
   * Reasoning (`reasoning_content`, as DeepSeek, vLLM and others send it) before the answer:
   * streamed as chunks with no content, or put on the message when not streaming.
   */
  reasoning?: string[];
  /**
   * The pause before each reasoning chunk (default: none); not streaming, the whole answer waits
   * for all of them, as a model that thinks first does.
   */
  reasoningIntervalMs?: number;
  /**
   * A refusal (`refusal`, as OpenAI's models decline a request) instead of text: streamed as
   * chunks of `delta.refusal`, or put on the message when not streaming.
   */
  refusal?: string[];
  /** Streaming: this many SSE comments (`: keep-alive`), 100 ms apart, before the first chunk. */
  keepAlives?: number;
  /** Streaming: the response ends cleanly after this many chunks, without finish_reason or [DONE]. */
  endAfterChunks?: number;
  /**
   * Streaming: after the chunk with the finish_reason, before the usage chunk and `[DONE]`, the
   * connection is left open with nothing more sent (`stall`) or cut (`cut`).
   */
  afterFinish?: 'stall' | 'cut';
  /**
   * Streaming: after this many content chunks, an SSE error event (`data: {"error": …}`, as
   * OpenRouter and vLLM report a failure once the stream's 200 is sent) and the end of the stream.
   */
  streamError?: { afterChunks: number; error: Record<string, unknown> };
  /** The connection is cut (reset) before any answer: an endpoint reached that drops the request. */
  resetBeforeHeaders?: boolean;
  /** This status with this body verbatim (an HTML error page, a truncated JSON…). */
  rawBody?: { status: number; contentType: string; body: string };
}

export type FakeResponder = (req: ReceivedCompletion, n: number) => FakeAnswer;

/**
 * An OpenAI-compatible chat completions endpoint on a free local port, speaking the wire format
 * of POST /v1/chat/completions (JSON, or SSE `data:` chunks ending in `[DONE]`), so the real
 * `openai` client and the apps using it are tested over HTTP. Every request is recorded; each is
 * answered by the responder.
 */
export class FakeOpenAiServer {
  readonly received: ReceivedCompletion[] = [];
  private readonly reported = { promptTokens: 0, completionTokens: 0 };
  private readonly server: Server;
  port = 0;

  private constructor(private responder: FakeResponder) {
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  static async start(responder: FakeResponder): Promise<FakeOpenAiServer> {
    const fake = new FakeOpenAiServer(responder);
    await new Promise<void>((resolve) => fake.server.listen(0, '127.0.0.1', resolve));
    fake.port = (fake.server.address() as AddressInfo).port;
    return fake;
  }

  /** The base URL to configure (`OPENAI_BASE_URL`). */
  get baseUrl(): string {
    return `http://127.0.0.1:${this.port}/v1`;
  }

  /** The usage reported so far, summed over every answer that carried it. */
  usage(): { promptTokens: number; completionTokens: number } {
    return { ...this.reported };
  }

  respondWith(responder: FakeResponder): void {
    this.responder = responder;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions')
      return send(res, 404, { error: { message: 'not found', type: 'invalid_request_error' } });
    let body: Record<string, any>;
    try {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return send(res, 400, { error: { message: 'bad JSON', type: 'invalid_request_error' } });
    }
    const received: ReceivedCompletion = {
      authorization: req.headers.authorization,
      model: String(body.model),
      stream: body.stream === true,
      includeUsage: body.stream_options?.include_usage === true,
      messages: Array.isArray(body.messages) ? body.messages : [],
      body,
    };
    this.received.push(received);
    const answer = this.responder(received, this.received.length);
    if (answer.delayMs) await pause(answer.delayMs, res);
    if (res.destroyed || !this.server.listening) {
      res.destroy();
      return;
    }
    if (answer.resetBeforeHeaders) return void res.socket?.resetAndDestroy();
    if (answer.rawBody) {
      res.writeHead(answer.rawBody.status, { 'content-type': answer.rawBody.contentType });
      return void res.end(answer.rawBody.body);
    }
    if (answer.status && answer.status >= 400)
      return send(
        res,
        answer.status,
        {
          error: {
            // Like providers that quote the key they refused: callers must not pass it on.
            message:
              answer.errorMessage ?? `fake failure ${answer.status} for ${received.authorization}`,
            type: answer.status < 500 ? 'invalid_request_error' : 'server_error',
            param: answer.errorParam ?? null,
            code: answer.errorCode ?? null,
          },
        },
        answer.headers,
      );
    const text = answer.text ?? answer.chunks?.join('') ?? '';
    const usage = answer.usage === undefined ? defaultUsage(received, text) : answer.usage;
    const report = () => {
      if (!usage) return;
      this.reported.promptTokens += usage.prompt_tokens;
      this.reported.completionTokens += usage.completion_tokens;
    };
    const base = { id: `chatcmpl-${this.received.length}`, created: 0, model: received.model };
    if (!received.stream && answer.stallAfterChunks !== undefined) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
      return;
    }
    const finish = answer.finishReason === undefined ? 'stop' : answer.finishReason;
    if (!received.stream) {
      const thinking = (answer.reasoningIntervalMs ?? 0) * (answer.reasoning?.length ?? 0);
      if (thinking) await pause(thinking, res);
      if (res.destroyed) return;
      report();
      const reasoning = answer.reasoning ? { reasoning_content: answer.reasoning.join('') } : {};
      const refused = answer.refusal ? { refusal: answer.refusal.join('') } : {};
      const message = { role: 'assistant', content: text, ...reasoning, ...refused };
      return send(res, 200, {
        ...base,
        object: 'chat.completion',
        choices: [{ index: 0, message, finish_reason: finish }],
        ...(usage ? { usage: { ...usage, total_tokens: total(usage) } } : {}),
      });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', ...answer.headers });
    const pieces = answer.chunks ?? split(text, 3);
    const event = (data: unknown) =>
      res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
    const chunk = (delta: Record<string, unknown>, reason: string | null = null) => ({
      ...base,
      object: 'chat.completion.chunk',
      choices: [{ index: 0, delta, finish_reason: reason }],
      ...(received.includeUsage ? { usage: null } : {}),
    });
    for (let i = 0; i < (answer.keepAlives ?? 0); i++) {
      await pause(100, res);
      if (res.destroyed) return;
      res.write(': keep-alive\n\n');
    }
    event(chunk({ role: 'assistant', content: '' }));
    for (const thought of answer.reasoning ?? []) {
      if (answer.reasoningIntervalMs) await pause(answer.reasoningIntervalMs, res);
      if (res.destroyed) return;
      event(chunk({ reasoning_content: thought }));
    }
    for (const piece of answer.refusal ?? []) event(chunk({ refusal: piece }));
    for (const [i, piece] of pieces.entries()) {
      if (answer.streamError && i >= answer.streamError.afterChunks) {
        event({ error: answer.streamError.error });
        return void res.end();
      }
      if (answer.endAfterChunks !== undefined && i >= answer.endAfterChunks) return void res.end();
      if (answer.cutAfterChunks !== undefined && i >= answer.cutAfterChunks) {
        res.destroy();
        return;
      }
      if (answer.stallAfterChunks !== undefined && i >= answer.stallAfterChunks) return;
      if (answer.chunkIntervalMs) await pause(answer.chunkIntervalMs, res);
      if (res.destroyed) return;
      event(chunk({ content: piece }));
      await new Promise((r) => setImmediate(r));
    }
    event(chunk({}, finish));
    if (answer.afterFinish === 'stall') return;
    if (answer.afterFinish === 'cut') {
      await new Promise((r) => setImmediate(r));
      return void res.destroy();
    }
    if (usage && received.includeUsage) {
      report();
      event({
        ...base,
        object: 'chat.completion.chunk',
        choices: [],
        usage: { ...usage, total_tokens: total(usage) },
      });
    }
    event('[DONE]');
    res.end();
  }
}

/** Waits `ms`, or less when the client goes away first. */
function pause(ms: number, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    res.on('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

const total = (u: { prompt_tokens: number; completion_tokens: number }) =>
  u.prompt_tokens + u.completion_tokens;

/** Distinct, recognisable counts: 1,000 + the prompt's messages, 10 + the text's characters. */
function defaultUsage(req: ReceivedCompletion, text: string) {
  return { prompt_tokens: 1000 + req.messages.length, completion_tokens: 10 + [...text].length };
}

function split(text: string, parts: number): string[] {
  const chars = [...text];
  const size = Math.max(1, Math.ceil(chars.length / parts));
  const out: string[] = [];
  for (let i = 0; i < chars.length; i += size) out.push(chars.slice(i, i + size).join(''));
  return out;
}
