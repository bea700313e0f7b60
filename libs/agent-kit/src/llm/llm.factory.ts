import type { LlmClient, LlmPrices } from './llm.types';
import { OfflineLlmClient } from './offline.llm';
import { OpenAiLlmClient } from './openai.llm';

export interface LlmConfig {
  provider: 'offline' | 'openai';
  offlineDelayMs?: number;
  baseUrl?: string;
  apiKey?: string;
  model?: string;
  timeoutMs?: number;
  maxRetries?: number;
  prices?: LlmPrices;
}

/** The configured model client; throws a clear Error when `openai` lacks a key or a model. */
export function createLlmClient(cfg: LlmConfig): LlmClient {
  switch (cfg.provider) {
    case 'offline':
      return new OfflineLlmClient({ delayMs: cfg.offlineDelayMs ?? 0 });
    case 'openai': {
      if (!cfg.apiKey) throw new Error('LLM_PROVIDER=openai needs OPENAI_API_KEY');
      if (!cfg.model) throw new Error('LLM_PROVIDER=openai needs LLM_MODEL (the model name)');
      return new OpenAiLlmClient({
        apiKey: cfg.apiKey,
        model: cfg.model,
        baseUrl: cfg.baseUrl || undefined,
        timeoutMs: cfg.timeoutMs,
        maxRetries: cfg.maxRetries,
        prices: cfg.prices,
      });
    }
    default:
      throw new Error(
        `unknown LLM provider ${JSON.stringify((cfg as { provider: unknown }).provider)}`,
      );
  }
}
