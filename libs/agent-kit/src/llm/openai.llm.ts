import OpenAI from 'openai';
import { createDeltaStream } from './delta-stream';
import { toLlmError } from './llm-error';
import type { LlmClient, LlmPrices, LlmRequest, LlmResult, LlmStream, LlmUsage } from './llm.types';
import { countMessageTokens, countTokens } from './token-counter';

export interface OpenAiLlmOptions {
  apiKey: string;
  model: string;
  /** Any OpenAI-compatible endpoint; the SDK's default when absent. */
  baseUrl?: string;
  /** Per-attempt request timeout (default 60 s). */
  timeoutMs?: number;
  /** Retries of connection errors, 408/409/429 and 5xx answers (default 2). */
  maxRetries?: number;
  /** When set (and not 0), every usage carries its cost. */
  prices?: LlmPrices;
}

/** The part of the SDK this client uses; tests pass a fake. */
export type ChatCompletionsApi = Pick<OpenAI, 'chat'>;

interface WireUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
}

/** Chat completions through the `openai` SDK, with usage taken from the provider when it reports it. */
export class OpenAiLlmClient implements LlmClient {
  readonly provider = 'openai' as const;
  private readonly api: ChatCompletionsApi;
  private streamOptionsRefused = false;

  constructor(
    private readonly options: OpenAiLlmOptions,
    api?: ChatCompletionsApi,
  ) {
    this.api =
      api ??
      new OpenAI({
        apiKey: options.apiKey,
        baseURL: options.baseUrl,
        timeout: options.timeoutMs ?? 60_000,
        maxRetries: options.maxRetries ?? 2,
      });
  }

  /** One completion; provider errors become LlmError without the key. */
  async complete(req: LlmRequest): Promise<LlmResult> {
    try {
      const response = await this.api.chat.completions.create({
        ...this.params(req),
        stream: false,
      });
      const text = response.choices[0]?.message?.content ?? '';
      return {
        text,
        model: response.model || this.options.model,
        usage: this.usage(req, text, response.usage),
      };
    } catch (error) {
      throw toLlmError(req.purpose, error, [this.options.apiKey]);
    }
  }

  /** A streamed completion; usage comes from the final chunk (`include_usage`). */
  stream(req: LlmRequest): LlmStream {
    return createDeltaStream(async (emit) => {
      let text = '';
      let model = this.options.model;
      let wireUsage: WireUsage | null | undefined;
      try {
        const chunks = await this.openStream(req);
        for await (const chunk of chunks) {
          const delta = chunk.choices[0]?.delta?.content;
          if (delta) {
            text += delta;
            emit(delta);
          }
          if (chunk.usage) wireUsage = chunk.usage;
          if (chunk.model) model = chunk.model;
        }
      } catch (error) {
        throw toLlmError(req.purpose, error, [this.options.apiKey]);
      }
      return { text, model, usage: this.usage(req, text, wireUsage) };
    });
  }

  /**
   * Asks for the usage chunk (`stream_options`) unless this endpoint refused it: some
   * OpenAI-compatible servers answer 400 to the option (older Azure API versions, strict
   * proxies). Then the stream is opened again without it, and never asked for again; usage is
   * counted by Loom's tokenizer.
   */
  private async openStream(req: LlmRequest) {
    const params = { ...this.params(req), stream: true as const };
    if (this.streamOptionsRefused) return this.api.chat.completions.create(params);
    try {
      return await this.api.chat.completions.create({
        ...params,
        stream_options: { include_usage: true },
      });
    } catch (error) {
      if (!refusesStreamOptions(error)) throw error;
      this.streamOptionsRefused = true;
      return this.api.chat.completions.create(params);
    }
  }

  private params(req: LlmRequest) {
    return {
      model: this.options.model,
      messages: req.messages.map((message) => ({ role: message.role, content: message.content })),
      ...(req.maxTokens !== undefined ? { max_tokens: req.maxTokens } : {}),
      ...(req.temperature !== undefined ? { temperature: req.temperature } : {}),
    };
  }

  /** The provider's counts, or our own tokenizer's when the endpoint reports none. */
  private usage(req: LlmRequest, text: string, wire: WireUsage | null | undefined): LlmUsage {
    const usage: LlmUsage = {
      promptTokens: wire?.prompt_tokens ?? countMessageTokens(req.messages),
      completionTokens: wire?.completion_tokens ?? countTokens(text),
    };
    const prices = this.options.prices;
    if (prices && (prices.promptUsdPerMTok > 0 || prices.completionUsdPerMTok > 0))
      usage.costUsd =
        (usage.promptTokens * prices.promptUsdPerMTok +
          usage.completionTokens * prices.completionUsdPerMTok) /
        1_000_000;
    return usage;
  }
}

/** A 400 that names `stream_options` (or `include_usage`): the endpoint does not take it. */
function refusesStreamOptions(error: unknown): boolean {
  const e = error as { status?: unknown; message?: unknown } | null;
  return e?.status === 400 && /stream_options|include_usage/i.test(String(e.message ?? ''));
}
