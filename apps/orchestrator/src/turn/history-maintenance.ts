import { Inject, Injectable } from '@nestjs/common';
import { LLM_CLIENT, LlmClient, makeTitle, withCost } from '@loom/agent-kit';
import { redactPii } from '@loom/security';
import {
  addUsage,
  ConversationRepository,
  emptyUsage,
  needsCompaction,
  Owner,
  truncateRuneSafe,
  Usage,
} from '@loom/session';
import { summaryPrompt, titlePrompt } from './history-prompts';

export const SUMMARY_THRESHOLD = 30;
export const KEEP_RECENT = 20;
const TITLE_MAX = 60;
/** Bounds on what a model may write (and cost): a title is cut to 60 characters anyway. */
const TITLE_MAX_TOKENS = 64;
const SUMMARY_MAX_TOKENS = 1024;

/**
 * Titles (once per conversation) and incremental summaries: over 30 messages, everything but
 * the last 20 is folded into the summary with its seq range; raw messages stay. PII never
 * reaches a title or a summary.
 */
@Injectable()
export class HistoryMaintenance {
  constructor(
    @Inject(LLM_CLIENT) private readonly llm: LlmClient,
    private readonly conversations: ConversationRepository,
  ) {}

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
      const title = truncateRuneSafe(
        redactPii(res.text.trim().replace(/^["'“]|["'”]$/g, '')),
        TITLE_MAX,
      );
      return { title: title || makeTitle(clean, TITLE_MAX), usage };
    } catch {
      // fall back to the rune-safe cut of the question
    }
    return { title: makeTitle(clean, TITLE_MAX), usage: emptyUsage() };
  }

  /**
   * `messageCount`: the log's length when the caller knows it (the turn that just appended the
   * reply under the lock); read otherwise. Below the threshold there is nothing to fold.
   */
  async afterTurn(
    owner: Owner,
    conversationId: string,
    fence: number,
    messageCount?: number,
  ): Promise<void> {
    const count = messageCount ?? (await this.conversations.messageCount(owner, conversationId));
    if (count <= SUMMARY_THRESHOLD) return;
    const previous = await this.conversations.summary(owner, conversationId);
    const range = needsCompaction(count, previous?.toSeq ?? 0, SUMMARY_THRESHOLD, KEEP_RECENT);
    if (!range) return;
    const messages = await this.conversations.messages(owner, conversationId, {
      afterSeq: range.fromSeq - 1,
      limit: range.toSeq - range.fromSeq + 1,
    });
    const history = messages.map((m) => ({
      seq: m.seq,
      role: m.role,
      content: redactPii(m.content),
      agentType: m.agentType,
    }));
    const res = await this.llm.complete({
      purpose: 'summarize',
      messages: summaryPrompt(previous?.text ?? null, history),
      context: { question: '', history, summary: previous?.text ?? null },
      maxTokens: SUMMARY_MAX_TOKENS,
    });
    // Spent whether or not the answer is usable. Under the turn's lock still: nobody else
    // writes the conversation meanwhile.
    const meta = await this.conversations.get(owner, conversationId, true);
    meta.usage = addUsage(meta.usage, withCost(res.usage));
    await this.conversations.save(owner, meta, fence);
    // A blank summary would replace what the last one folded: keep that one, fold next turn.
    if (!res.text.trim()) throw new Error('the model returned an empty summary');
    await this.conversations.saveSummary(
      owner,
      conversationId,
      {
        text: redactPii(res.text),
        fromSeq: previous?.fromSeq ?? range.fromSeq,
        toSeq: range.toSeq,
        createdAt: new Date().toISOString(),
      },
      fence,
    );
  }
}
