export interface LlmMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export type LlmPurpose = 'plan' | 'answer' | 'research' | 'summarize' | 'title';

export interface LlmHistoryMessage {
  seq: number;
  role: 'user' | 'assistant';
  content: string;
  agentType?: string | null;
}

/** Structured facts the prompt was built from; the offline model answers from these. */
export interface LlmContext {
  /** e.g. 'labor-law' */
  agentType?: string;
  /** e.g. '劳动法专家' */
  role?: string;
  /** The current user message. */
  question: string;
  history: LlmHistoryMessage[];
  /** Summary of older turns. */
  summary?: string | null;
  /** Task-shared data written by other agents. */
  shared?: Record<string, { value: unknown; writer: string }>;
  language?: 'zh' | 'en';
}

export interface LlmRequest {
  purpose: LlmPurpose;
  messages: LlmMessage[];
  context?: LlmContext;
  maxTokens?: number;
  temperature?: number;
  /**
   * Ends the call when it aborts (the agent's execution was cancelled): the call stops waiting,
   * closes its connection and rejects with `signal.reason`, as `fetch` does.
   */
  signal?: AbortSignal;
}

export interface LlmUsage {
  promptTokens: number;
  completionTokens: number;
  /** What the call cost in USD, when the model is priced (LLM_*_USD_PER_MTOK). */
  costUsd?: number;
}

/** A model's list prices, USD per million tokens. */
export interface LlmPrices {
  promptUsdPerMTok: number;
  completionUsdPerMTok: number;
}

/** A call's usage as the session stores it: priced, or at 0 USD. */
export function withCost(usage: LlmUsage): Required<LlmUsage> {
  return {
    promptTokens: usage.promptTokens,
    completionTokens: usage.completionTokens,
    costUsd: usage.costUsd ?? 0,
  };
}

export interface LlmResult {
  text: string;
  usage: LlmUsage;
  model: string;
}

export interface LlmStream {
  deltas: AsyncIterable<string>;
  result: Promise<LlmResult>;
}

export interface LlmClient {
  readonly provider: 'offline' | 'openai';
  complete(req: LlmRequest): Promise<LlmResult>;
  /** Yields text deltas; resolves `usage` when the stream ends. */
  stream(req: LlmRequest): LlmStream;
}

export const LLM_CLIENT = Symbol('LLM_CLIENT');

/**
 * A failed model call; the message never carries credentials. `publicMessage` is what callers
 * outside the agent see: the HTTP status at most, never the provider's own text.
 */
export class LlmError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    readonly publicMessage = status
      ? `the model call failed (HTTP ${status})`
      : 'the model call failed',
  ) {
    super(message);
    this.name = 'LlmError';
  }

  /** What the call cost when the provider answered (an answer then refused, say). */
  usage?: LlmUsage;

  /** The provider is rate limiting or overloaded (429, 503, 529) after the retries: try later. */
  busy = false;

  /** When busy: the seconds the provider asked to wait (its Retry-After), for Loom's client. */
  retryAfterS?: number;
}

/**
 * The model declined the request (`refusal` in place of content, as OpenAI's models say it):
 * no answer, but not an empty one either. Its words are the model's, not passed on.
 */
export class LlmRefusal extends LlmError {
  constructor(purpose: string) {
    super(`LLM ${purpose} answer is a refusal`, undefined, 'the model refused to answer');
    this.name = 'LlmRefusal';
  }
}
