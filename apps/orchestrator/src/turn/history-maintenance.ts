import { Inject, Injectable, Logger } from '@nestjs/common';
import {
  LLM_CLIENT,
  LlmClient,
  LlmError,
  LlmHistoryMessage,
  LlmResult,
  makeTitle,
  truncate,
  withCost,
} from '@loom/agent-kit';
import { redactPii } from '@loom/security';
import {
  addUsage,
  AGENT_HISTORY_BUDGET,
  compactionRange,
  ConversationRepository,
  countTokens,
  emptyUsage,
  oldestWithinBudget,
  Owner,
  Usage,
  withinTokenBudget,
} from '@loom/session';
import { MetricsService } from '../metrics/metrics.service';
import { summaryPrompt, titlePrompt } from './history-prompts';
import { fallbackSummary } from './summary-fallback';

/** A model's summary as it is kept: trimmed, when it is not blank and within its token cap. */
export function usableSummary(text: unknown): string | null {
  if (typeof text !== 'string') return null;
  const trimmed = text.trim();
  return trimmed && countTokens(trimmed) <= SUMMARY_MAX_TOKENS ? trimmed : null;
}

export const SUMMARY_THRESHOLD = 30;
export const KEEP_RECENT = 20;
const TITLE_MAX = 60;
/** Bounds on what a model may write (and cost): a title is cut to 60 characters anyway. */
const TITLE_MAX_TOKENS = 64;
const SUMMARY_MAX_TOKENS = 1024;
/**
 * The length a summary is asked to keep to: well within SUMMARY_MAX_TOKENS (about 1.3 tokens an
 * English word, one or two a Chinese character), so a model that follows it is never cut off.
 */
const SUMMARY_MAX_WORDS = 600;
/**
 * What one summary call folds, at most: a longer backlog takes several turns, and the prompt
 * (with the earlier summary, at most SUMMARY_MAX_TOKENS) fits a model of an 8k context.
 */
const FOLD_MAX_TOKENS = 6_000;
/**
 * A message is folded from its first characters only (2,000: at most a few thousand tokens):
 * one message larger than the model's context would otherwise fail every summary call, and the
 * summary would never move past it.
 */
const FOLD_MESSAGE_MAX_CHARS = 2_000;

/**
 * Titles (once per conversation) and incremental summaries: over 30 messages, everything but
 * the last 20 is folded into the summary with its seq range, and earlier whatever the agents'
 * history budget no longer holds, so no message falls between the summary and the history an
 * agent sees; raw messages stay. PII never reaches a title or a summary.
 */
@Injectable()
export class HistoryMaintenance {
  constructor(
    @Inject(LLM_CLIENT) private readonly llm: LlmClient,
    private readonly conversations: ConversationRepository,
    private readonly metrics: MetricsService,
  ) {}

  private readonly log = new Logger('HistoryMaintenance');

  /** The title, and what asking the model for it cost (nothing when it failed). */
  async title(firstQuestion: string): Promise<{ title: string; usage: Usage }> {
    const clean = redactPii(firstQuestion);
    try {
      const res = await this.llm.complete({
        purpose: 'title',
        messages: titlePrompt(clean, TITLE_MAX),
        maxTokens: TITLE_MAX_TOKENS,
        context: { question: clean, history: [] },
      });
      const usage = withCost(res.usage);
      const title = truncate(
        redactPii(res.text.trim().replace(/^["'“]|["'”]$/g, '')).trim(),
        TITLE_MAX,
      );
      return { title: title || makeTitle(clean, TITLE_MAX), usage };
    } catch (error) {
      // Fall back to the rune-safe cut of the question; an answer refused (cut off) still cost.
      const usage = error instanceof LlmError && error.usage ? withCost(error.usage) : emptyUsage();
      return { title: makeTitle(clean, TITLE_MAX), usage };
    }
  }

  /**
   * `messageCount`: the log's length when the caller knows it (the turn that just appended the
   * reply under the lock); read otherwise. Folds what the next turn's agents would not see.
   */
  async afterTurn(
    owner: Owner,
    conversationId: string,
    fence: number,
    messageCount?: number,
  ): Promise<void> {
    const count = messageCount ?? (await this.conversations.messageCount(owner, conversationId));
    // Side by side: the newest messages, and the summary that says which of them are past it.
    const [previous, newest] = await Promise.all([
      this.conversations.summary(owner, conversationId),
      this.conversations.messages(owner, conversationId, {
        last: AGENT_HISTORY_BUDGET.maxMessages,
      }),
    ]);
    const summarized = previous?.toSeq ?? 0;
    // The next turn's agents get exactly these: the newest past the summary, within budget.
    const tail = newest.filter((m) => m.seq > summarized);
    const visible = withinTokenBudget(tail, AGENT_HISTORY_BUDGET.historyTokens).length;
    const range = compactionRange(count, summarized, visible, {
      threshold: SUMMARY_THRESHOLD,
      keep: KEEP_RECENT,
    });
    if (!range) return;
    const backlog = await this.conversations.messages(owner, conversationId, {
      afterSeq: range.fromSeq - 1,
      limit: range.toSeq - range.fromSeq + 1,
    });
    // Redacted before it is cut (a prefix of it, far wider than what is kept: an answer may be
    // 100,000 characters): a cut through PII leaves a part the redaction no longer recognises.
    const messages = oldestWithinBudget(
      backlog.map((m) =>
        m.content.length > FOLD_MESSAGE_MAX_CHARS
          ? {
              ...m,
              content: truncate(
                redactPii(m.content.trim().slice(0, FOLD_MESSAGE_MAX_CHARS * 4)),
                FOLD_MESSAGE_MAX_CHARS,
              ),
              tokens: 0,
            }
          : m,
      ),
      FOLD_MAX_TOKENS,
    );
    if (messages.length === 0) return;
    const history = messages.map((m) => ({
      seq: m.seq,
      role: m.role,
      content: redactPii(m.content),
      agentType: m.agentType,
    }));
    const modelSummary = await this.summarize(
      owner,
      conversationId,
      fence,
      previous?.text ?? null,
      history,
    );
    let folded = history;
    let text = modelSummary;
    if (text === null) {
      // No usable summary: what the next turn's agents still see stays raw in their history (the
      // model is asked again next turn); what they would no longer see is folded without it.
      folded = history.filter((m) => m.seq <= count - visible);
      if (folded.length === 0) return;
      text = fallbackSummary(previous?.text ?? null, folded, SUMMARY_MAX_TOKENS);
    }
    await this.conversations.saveSummary(
      owner,
      conversationId,
      {
        text: redactPii(text),
        fromSeq: previous?.fromSeq ?? range.fromSeq,
        toSeq: folded[folded.length - 1].seq,
        createdAt: this.conversations.now(),
      },
      fence,
    );
  }

  /**
   * The model's summary of `history` folded into `previous`, when it is usable: not blank, and
   * within SUMMARY_MAX_TOKENS (it goes into every agent's system prompt and the next summary
   * prompt; a model that ignores its length would make every later summary call too long).
   * Otherwise, and when the call fails (cut off, busy, refused), null (the caller folds what
   * must be folded with `fallbackSummary`). What the call cost is counted either way.
   */
  private async summarize(
    owner: Owner,
    conversationId: string,
    fence: number,
    previous: string | null,
    history: LlmHistoryMessage[],
  ): Promise<string | null> {
    let res: LlmResult | null = null;
    try {
      res = await this.llm.complete({
        purpose: 'summarize',
        messages: summaryPrompt(previous, history, SUMMARY_MAX_WORDS),
        context: { question: '', history, summary: previous },
        maxTokens: SUMMARY_MAX_TOKENS,
      });
    } catch (error) {
      this.log.warn(`the summary call failed (${describe(error)}): folded without it`);
      // A summary cut off at its token limit is refused, but it was paid for.
      if (error instanceof LlmError && error.usage)
        await this.spend(owner, conversationId, fence, withCost(error.usage));
    }
    let text: string | null = null;
    if (res) {
      await this.spend(owner, conversationId, fence, withCost(res.usage));
      text = usableSummary(res.text);
      if (text === null) this.log.warn('the model returned no usable summary: folded without it');
    }
    return text;
  }

  /** Spent whether or not the answer is usable. Under the turn's lock: nobody else writes meanwhile. */
  private async spend(owner: Owner, conversationId: string, fence: number, usage: Usage) {
    const meta = await this.conversations.get(owner, conversationId, true);
    meta.usage = addUsage(meta.usage, usage);
    await this.conversations.save(owner, meta, fence);
    this.metrics.spent(usage);
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : 'not an Error';
}
