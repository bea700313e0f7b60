import { setTimeout as sleep } from 'timers/promises';
import { createDeltaStream } from './delta-stream';
import type { LlmClient, LlmContext, LlmRequest, LlmResult, LlmStream } from './llm.types';
import { composeAnswer, composeResearch } from './offline-answer';
import { composeSummary, composeTitle } from './offline-summary';
import { chunkText, detectLanguage, type Language } from './text';
import { countMessageTokens, countTokens } from './token-counter';

export const OFFLINE_MODEL = 'loom-offline-1';
const STREAM_CHUNKS = 4;

export interface OfflineLlmOptions {
  /** Latency added to every call, in milliseconds (tests of crashes mid-task). */
  delayMs?: number;
}

/** The context of a request that came without one: the last user message is the question. */
function contextOf(req: LlmRequest): LlmContext {
  if (req.context) return req.context;
  const question = req.messages.filter((message) => message.role === 'user').at(-1)?.content;
  return { question: question ?? '', history: [] };
}

/** The language of the question; the conversation's language when the question has no letters. */
function questionLanguage(context: LlmContext): Language {
  return detectLanguage(context.question, conversationLanguage(context));
}

function conversationLanguage(context: LlmContext): Language {
  const text = context.history.map((message) => message.content).join(' ') || context.question;
  return context.language ?? detectLanguage(text);
}

/**
 * A deterministic model without network access. Its answers are built from the request's
 * structured context, so a transcript shows which history and shared data each agent saw.
 */
export class OfflineLlmClient implements LlmClient {
  readonly provider = 'offline' as const;

  constructor(private readonly options: OfflineLlmOptions = {}) {}

  /** The whole reply after the configured delay. */
  async complete(req: LlmRequest): Promise<LlmResult> {
    await this.delay(req.signal);
    return this.respond(req);
  }

  /** The same reply as `complete`, in a few deltas. */
  stream(req: LlmRequest): LlmStream {
    return createDeltaStream(async (emit) => {
      await this.delay(req.signal);
      const result = this.respond(req);
      for (const chunk of chunkText(result.text, STREAM_CHUNKS)) {
        req.signal?.throwIfAborted();
        emit(chunk);
        await sleep(0);
      }
      return result;
    });
  }

  private respond(req: LlmRequest): LlmResult {
    const text = this.compose(req);
    return {
      text,
      model: OFFLINE_MODEL,
      usage: {
        promptTokens: countMessageTokens(req.messages),
        completionTokens: countTokens(text),
      },
    };
  }

  private compose(req: LlmRequest): string {
    const context = contextOf(req);
    switch (req.purpose) {
      case 'answer':
        return composeAnswer(context, questionLanguage(context));
      case 'research':
        return composeResearch(context, questionLanguage(context));
      case 'summarize':
        return composeSummary(context, conversationLanguage(context));
      case 'title':
        return composeTitle(context);
      case 'plan':
        // The planner routes by rules when the model is offline; this only keeps the contract total.
        return JSON.stringify({ intent: null, agents: [] });
    }
  }

  /** The configured latency; it ends early, rejecting with the signal's reason, when `signal` aborts. */
  private async delay(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (!this.options.delayMs || this.options.delayMs <= 0) return;
    await sleep(this.options.delayMs, undefined, { signal }).catch((err: unknown) => {
      throw signal?.aborted ? signal.reason : err;
    });
  }
}
