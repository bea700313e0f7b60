import { Logger } from '@nestjs/common';
import OpenAI, { APIConnectionError, APIConnectionTimeoutError } from 'openai';
import { boundedMessage, MAX_ANSWER_CHARS } from '../contracts/agent-messages';
import { CallWatch, ON_PROGRESS, watchingFetch } from './call-watch';
import { createDeltaStream } from './delta-stream';
import { redactSecrets, streamedFailure, toLlmError } from './llm-error';
import {
  LlmError,
  LlmRefusal,
  type LlmClient,
  type LlmPrices,
  type LlmRequest,
  type LlmResult,
  type LlmStream,
  type LlmUsage,
} from './llm.types';
import { askAgain, retryAfterSeconds, withRetries } from './model-retries';
import { countMessageTokens, countTokens } from './token-counter';

export interface OpenAiLlmOptions {
  apiKey: string;
  model: string;
  /** Any OpenAI-compatible endpoint; the SDK's default when absent. */
  baseUrl?: string;
  /**
   * Per attempt, until the answer's headers (the SDK's time-out); then, streaming, the longest
   * silence between chunks. Default 30 s. A call, its retries and pauses included, must have
   * its answer (a stream: its first headers) within timeoutMs × attempts + at most 10 s.
   */
  timeoutMs?: number;
  /** Retries of connection errors, 408/409/429 and 5xx answers (default 2). */
  maxRetries?: number;
  /** When set (and not 0), every usage carries its cost. */
  prices?: LlmPrices;
}

/** The part of the SDK this client uses; tests pass a fake. */
export type ChatCompletionsApi = Pick<OpenAI, 'chat'>;

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_RETRIES = 2;
/** Room for the pauses between attempts within a call's deadline (at most one time-out). */
const BACKOFF_ALLOWANCE_MS = 10_000;
/** More tokens than any call has: a figure past it is no count (the orchestrator's bound too). */
const MAX_TOKENS_PER_CALL = 100_000_000;
/** An answer that keeps coming is let run this long at most. */
const ANSWER_MAX_MS = 10 * 60_000;

interface WireUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
}

/** Chat completions through the `openai` SDK, with usage taken from the provider when it reports it. */
export class OpenAiLlmClient implements LlmClient {
  readonly provider = 'openai' as const;
  private readonly api: ChatCompletionsApi;
  /** What this endpoint answered 400 to: never sent again by this client. */
  private readonly refused = new Set<RefusableOption>();
  private estimateLogged = false;
  private readonly log = new Logger('OpenAiLlmClient');

  constructor(
    private readonly options: OpenAiLlmOptions,
    api?: ChatCompletionsApi,
  ) {
    this.api =
      api ??
      new OpenAI({
        apiKey: options.apiKey,
        baseURL: options.baseUrl,
        timeout: this.timeoutMs,
        maxRetries: 0, // withRetries: pauses that know the deadline
        fetch: watchingFetch,
        logger: sdkLogger([options.apiKey]),
      });
  }

  private get timeoutMs(): number {
    return this.options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  private get retries(): number {
    return this.options.maxRetries ?? DEFAULT_RETRIES;
  }

  /**
   * The clock of one call: its start within timeoutMs × attempts + pauses, then silence; and
   * the caller's signal. Its signal is the SDK's `signal` request option.
   */
  private watch(cancel?: AbortSignal): CallWatch {
    const pauses = Math.min(BACKOFF_ALLOWANCE_MS, this.timeoutMs);
    return new CallWatch(
      this.timeoutMs * (this.retries + 1) + pauses,
      this.timeoutMs,
      ANSWER_MAX_MS,
      cancel,
    );
  }

  /**
   * One completion, streamed from the provider all the same: a model that thinks before it
   * answers shows it is alive only while streaming (reasoning chunks, keep-alives), and a
   * silent one is then told from a slow one by LLM_TIMEOUT_MS of silence.
   */
  complete(req: LlmRequest): Promise<LlmResult> {
    return this.run(req, () => undefined);
  }

  /** A streamed completion; usage comes from the final chunk (`include_usage`). */
  stream(req: LlmRequest): LlmStream {
    return createDeltaStream((emit) => this.run(req, emit));
  }

  /**
   * Provider errors become LlmError without the key; an unfinished answer is one too. A call
   * whose `req.signal` aborted rejects with its reason, whatever the SDK made of the abort. Once
   * the answer has started, a failure carries what it cost (the prompt was taken, the text so
   * far produced): a stream cut off or fallen silent mid-answer is paid for like a refused one.
   */
  private async run(req: LlmRequest, emit: (delta: string) => void): Promise<LlmResult> {
    const watch = this.watch(req.signal);
    try {
      req.signal?.throwIfAborted();
      return await withRetries(
        () => this.attempt(req, emit, watch),
        this.retries,
        watch.signal,
        watch.at,
        this.timeoutMs,
      );
    } catch (error) {
      if (req.signal?.aborted) throw req.signal.reason;
      throw this.failure(req, error, watch.stopped);
    } finally {
      watch.end();
    }
  }

  /**
   * One request: until its answer starts, the SDK's errors as they are (withRetries judges them);
   * from then on an LlmError, which is asked again only when the provider said in the stream it
   * is busy before the answer had any text.
   */
  private async attempt(
    req: LlmRequest,
    emit: (delta: string) => void,
    watch: CallWatch,
  ): Promise<LlmResult> {
    let text = '';
    let model = this.options.model;
    let wireUsage: WireUsage | null | undefined;
    let finish: string | null = null;
    let refused = false;
    const chunks = await this.openStream(req, watch);
    try {
      for await (const chunk of chunks) {
        watch.progress(); // for an injected API; over HTTP every byte already counted
        const choice = chunk.choices?.[0];
        const delta = choice?.delta?.content;
        if (delta) {
          text += delta;
          emit(delta);
          // No answer this long is taken (the agent kit refuses it): read no more of it, and
          // pay no more for it (closing the stream stops the model).
          if (text.length > MAX_ANSWER_CHARS) throw tooLong(req.purpose);
        }
        // A refusal (OpenAI's models): not text of the answer, and no answer at all.
        if (choice?.delta?.refusal) refused = true;
        if (choice?.finish_reason) finish = choice.finish_reason;
        if (chunk.usage) wireUsage = chunk.usage;
        if (chunk.model) model = chunk.model;
      }
      // The SDK ends an aborted stream as if it were complete: it was not, unless the model had
      // said it finished (then only the usage chunk was missing).
      if (watch.stopped && !finish) throw timedOut(req.purpose);
      const result = { text, model, usage: this.usage(req, text, wireUsage, !watch.stopped) };
      // A stream that ends without saying why (a proxy that closed it cleanly, a 200 that was
      // no stream at all) is not whole.
      if (!finish) throw withUsage(brokeOff(req.purpose), result.usage);
      if (refused && !text.trim()) throw withUsage(new LlmRefusal(req.purpose), result.usage);
      return finished(req.purpose, finish, result);
    } catch (error) {
      if (req.signal?.aborted) throw req.signal.reason;
      // The model said it finished (`finish_reason`): a stream that then falls silent or is cut
      // before its usage chunk and `[DONE]` lost only the provider's count, not the answer.
      if (finish && !(error instanceof LlmError))
        return finished(req.purpose, finish, {
          text,
          model,
          usage: this.usage(req, text, wireUsage, false),
        });
      // An error event saying the provider is busy (OpenRouter, vLLM): the busy answer, asked
      // again like a 429 or 503 while the user has seen nothing of it.
      const busy = streamedFailure(req.purpose, error, [this.options.apiKey]);
      if (busy && !text) {
        watch.restart();
        askAgain(busy);
      }
      // A connection cut mid-answer (undici's "terminated", an error event) is a broken-off answer.
      const failure =
        busy ??
        (error instanceof LlmError ||
        watch.stopped ||
        (error as Error | null)?.name === 'SyntaxError'
          ? this.failure(req, error, watch.stopped)
          : brokeOff(req.purpose));
      // Counted by Loom: a provider that reports usage had no chance to (no warning for it).
      throw failure.usage ? failure : withUsage(failure, this.usage(req, text, wireUsage, false));
    }
  }

  /**
   * Opens the stream, learning once what this endpoint refuses and asking again without it:
   * the usage chunk (`stream_options`: older Azure API versions, strict proxies; usage is then
   * counted by Loom's tokenizer), `max_tokens` and a `temperature` other than the default
   * (OpenAI's reasoning models: o-series, gpt-5; such a model is then asked without a cap, since
   * its reasoning would spend a small one). Each refusal costs one extra request, once.
   */
  private async openStream(req: LlmRequest, watch: CallWatch) {
    const options = {
      signal: watch.signal,
      fetchOptions: { [ON_PROGRESS]: watch.progress } as Record<string, never>,
    };
    for (;;) {
      const params = this.params(req);
      try {
        return await this.api.chat.completions.create({ ...params, stream: true }, options);
      } catch (error) {
        const refused = refusedOption(error, req);
        // Asked again only when this request sent it: a concurrent call may have learned the
        // refusal first (this request was already on the wire), and it is not the caller's fault.
        if (!refused || !(refused in params)) throw error;
        if (!this.refused.has(refused)) {
          this.refused.add(refused);
          this.log.warn(`${this.options.model} refuses ${refused}: asking without it from now on`);
        }
      }
    }
  }

  /** Says once per process that usage is Loom's estimate: the totals are not the provider's bill. */
  private estimated(wire: WireUsage | null | undefined): void {
    if (this.estimateLogged) return;
    this.estimateLogged = true;
    this.log.warn(
      `${this.options.model} reported ${wire ? 'unusable' : 'no'} token usage: ` +
        "usage is counted with Loom's tokenizer, an estimate",
    );
  }

  /** A failed call as LlmError: timed out (Loom's deadline or the SDK's), else the provider's. */
  private failure(req: LlmRequest, error: unknown, stopped: boolean): LlmError {
    if (error instanceof LlmError) return error;
    // A 200 of broken JSON (by name: under Jest the SDK's SyntaxError is of another realm).
    if ((error as Error | null)?.name === 'SyntaxError') return malformed(req.purpose);
    if (stopped || error instanceof APIConnectionTimeoutError) return timedOut(req.purpose);
    // No answer at all, retries included. The system's code says why; it names no secret. A
    // connection the endpoint took and then cut (reset, closed) is no wrong OPENAI_BASE_URL:
    // the endpoint is there, and failed this request.
    const code = error instanceof APIConnectionError ? networkCode(error) : undefined;
    if (code && CUT_CODES.has(code))
      return new LlmError(
        `LLM ${req.purpose} request failed: ${code}`,
        undefined,
        `the model endpoint closed the connection before it answered (${code})`,
      );
    // Else where Loom looks is wrong or down (refused, no such host, TLS).
    if (code)
      return new LlmError(
        `LLM ${req.purpose} request failed: ${code}`,
        undefined,
        `the model endpoint could not be reached (${code}; OPENAI_BASE_URL)`,
      );
    const failure = toLlmError(req.purpose, error, [this.options.apiKey]);
    if (failure.busy) failure.retryAfterS = retryAfterSeconds(error);
    return failure;
  }

  private params(req: LlmRequest) {
    const asks = (option: RefusableOption) => !this.refused.has(option);
    return {
      model: this.options.model,
      messages: req.messages.map((message) => ({ role: message.role, content: message.content })),
      ...(req.maxTokens !== undefined && asks('max_tokens') ? { max_tokens: req.maxTokens } : {}),
      ...(req.temperature !== undefined && asks('temperature')
        ? { temperature: req.temperature }
        : {}),
      ...(asks('stream_options') ? { stream_options: { include_usage: true } } : {}),
    };
  }

  /** The provider's counts, or our own tokenizer's when the endpoint reports none. */
  private usage(
    req: LlmRequest,
    text: string,
    wire: WireUsage | null | undefined,
    whole = true,
  ): LlmUsage {
    // The provider's counts when they are counts. An endpoint that sends anything else, 0
    // for a prompt that was sent or an answer that came (some report zeros rather than
    // nothing), or more than any call can have (the orchestrator would refuse the agent's
    // report whole, and count the call as free), is counted by Loom's tokenizer instead of
    // corrupting or zeroing the totals.
    const count = (n: unknown, nonEmpty: boolean) =>
      Number.isSafeInteger(n) &&
      (n as number) >= 0 &&
      (n as number) <= MAX_TOKENS_PER_CALL &&
      !(nonEmpty && n === 0)
        ? (n as number)
        : undefined;
    const reported = {
      promptTokens: count(wire?.prompt_tokens, req.messages.length > 0),
      completionTokens: count(wire?.completion_tokens, text.length > 0),
    };
    const usage: LlmUsage = {
      promptTokens: reported.promptTokens ?? countMessageTokens(req.messages),
      completionTokens: reported.completionTokens ?? countTokens(text),
    };
    if (reported.promptTokens === undefined || reported.completionTokens === undefined)
      if (whole) this.estimated(wire);
    const prices = this.options.prices;
    if (prices && (prices.promptUsdPerMTok > 0 || prices.completionUsdPerMTok > 0))
      usage.costUsd =
        (usage.promptTokens * prices.promptUsdPerMTok +
          usage.completionTokens * prices.completionUsdPerMTok) /
        1_000_000;
    return usage;
  }
}

const REFUSABLE = ['stream_options', 'max_tokens', 'temperature'] as const;
type RefusableOption = (typeof REFUSABLE)[number];

/**
 * The option a 400 refuses, by the error's `param` (OpenAI's: then by it alone) or, from servers
 * that name no `param`, its message: `stream_options`; `max_tokens` ("Use 'max_completion_tokens'
 * instead"); a `temperature` the model does not support ("Only the default (1) value is
 * supported"). A message may quote the request (a 400 about its content): words that the
 * request's messages hold themselves are no evidence, and a refusal wrongly learned would change
 * every later call of the process.
 */
function refusedOption(error: unknown, req: LlmRequest): RefusableOption | undefined {
  const e = error as {
    status?: unknown;
    message?: unknown;
    param?: unknown;
    code?: unknown;
  } | null;
  if (e?.status !== 400) return undefined;
  const said = String(e.message ?? '');
  if (typeof e.param === 'string') {
    const param = e.param.replace(/\..*$/, ''); // stream_options.include_usage
    if (!(REFUSABLE as readonly string[]).includes(param)) return undefined;
    // Not a value out of range (no value Loom sends is): one the model does not take at all.
    const unsupported =
      param === 'stream_options' ||
      /^unsupported_/.test(String(e.code)) ||
      /not support|unsupported|only the default|max_completion_tokens/i.test(said);
    return unsupported ? (param as RefusableOption) : undefined;
  }
  const asked = req.messages.map((m) => m.content).join('\n');
  const says = (pattern: RegExp) => pattern.test(said) && !pattern.test(asked);
  if (says(/stream_options|include_usage/i)) return 'stream_options';
  if (says(/max_tokens/i) && /not supported|unsupported|max_completion_tokens/i.test(said))
    return 'max_tokens';
  if (says(/temperature/i) && /not support|unsupported|only the default/i.test(said))
    return 'temperature';
  return undefined;
}

/** The longest line the SDK's log may write: it quotes what it received (a bad chunk, a body). */
const SDK_LOG_MAX_CHARS = 500;

/**
 * The SDK's own log lines (a stream chunk it could not parse, OPENAI_LOG's request details)
 * through Nest's logger: JSON lines with PII redacted like every other and the client's key
 * masked, each bounded, rather than raw console output.
 */
function sdkLogger(secrets: readonly string[]) {
  const log = new Logger('openai');
  // The client's key masked, whatever its shape (an error body may echo it); then cut where no
  // email, phone or key is split: the logger redacts the line it is given, and a fragment left
  // at a plain cut is no longer recognised.
  const line = (message: string, rest: unknown[]) =>
    boundedMessage(
      redactSecrets([message, ...rest.map(shown)].join(' '), secrets),
      SDK_LOG_MAX_CHARS,
    );
  return {
    error: (message: string, ...rest: unknown[]) => log.error(line(message, rest)),
    warn: (message: string, ...rest: unknown[]) => log.warn(line(message, rest)),
    info: (message: string, ...rest: unknown[]) => log.log(line(message, rest)),
    debug: (message: string, ...rest: unknown[]) => log.debug(line(message, rest)),
  };
}

function shown(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value); // a cycle
  }
}

/** The codes of a connection the endpoint accepted and then cut before its answer's headers. */
const CUT_CODES = new Set([
  'ECONNRESET',
  'EPIPE',
  'ECONNABORTED',
  'UND_ERR_SOCKET', // undici: "other side closed"
  'UND_ERR_CLOSED',
]);

/** The system error code under a connection error (fetch's cause chain: ECONNREFUSED, ENOTFOUND…). */
function networkCode(error: Error): string | undefined {
  let cause: unknown = error.cause;
  for (let depth = 0; depth < 4 && cause; depth++) {
    const { code } = cause as { code?: unknown };
    if (typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,40}$/.test(code)) return code;
    cause = (cause as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * The result when the model finished its answer; else an LlmError carrying what the call cost.
 * An answer cut off at the token limit, by a content filter or by an error is not one to store.
 */
function finished(purpose: string, reason: string | null, result: LlmResult): LlmResult {
  const says = Object.hasOwn(UNFINISHED, reason ?? '') ? UNFINISHED[reason!] : undefined;
  if (!says) return result;
  throw withUsage(
    new LlmError(`LLM ${purpose} answer ended with finish_reason ${reason}`, undefined, says),
    result.usage,
  );
}

const CUT_OFF = "the model's answer was cut off at its token limit";
const BROKE_OFF = "the model's answer broke off";

/**
 * The finish_reasons of an answer that is not whole, as OpenAI-compatible servers name them:
 * OpenAI's; Mistral's `model_length` (the context was full) and `error`; `max_tokens` (proxies
 * that pass Anthropic's on); vLLM's `abort`. Any other (`stop`, `tool_calls`, TGI's `eos_token`…)
 * ends a whole answer.
 */
const UNFINISHED: Record<string, string> = {
  length: CUT_OFF,
  model_length: CUT_OFF,
  max_tokens: CUT_OFF,
  content_filter: "the model's answer was withheld by its content filter",
  error: BROKE_OFF,
  abort: BROKE_OFF,
};

function withUsage(error: LlmError, usage: LlmUsage): LlmError {
  error.usage = usage;
  return error;
}

function brokeOff(purpose: string): LlmError {
  return new LlmError(`LLM ${purpose} stream ended without a finish_reason`, undefined, BROKE_OFF);
}

function tooLong(purpose: string): LlmError {
  return new LlmError(
    `LLM ${purpose} answer is longer than ${MAX_ANSWER_CHARS} characters`,
    undefined,
    `the model's answer was longer than Loom takes (${MAX_ANSWER_CHARS} characters)`,
  );
}

function malformed(purpose: string): LlmError {
  return new LlmError(
    `LLM ${purpose} answer is not a chat completion`,
    undefined,
    'the model endpoint sent a malformed answer',
  );
}

function timedOut(purpose: string): LlmError {
  return new LlmError(`LLM ${purpose} request timed out`, undefined, 'the model call timed out');
}
