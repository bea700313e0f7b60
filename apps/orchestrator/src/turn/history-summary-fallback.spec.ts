import { LlmClient, LlmError, LlmRequest } from '@loom/agent-kit';
import {
  AGENT_HISTORY_BUDGET,
  ConversationRepository,
  countTokens,
  MemorySessionStore,
  withinTokenBudget,
} from '@loom/session';
import { MetricsService } from '../metrics/metrics.service';
import { HistoryMaintenance } from './history-maintenance';

const owner = { tenantId: 'tenant-s', userId: 'user-s' };

/** A summariser that ignores the prompt: every answer is `answer()`, or it throws. */
function modelThat(answer: () => string) {
  return {
    provider: 'openai',
    complete: async (req: LlmRequest) => {
      const tokens = req.messages.reduce((n, m) => n + countTokens(m.content), 0);
      return { text: answer(), model: 'm', usage: { promptTokens: tokens, completionTokens: 5 } };
    },
    stream: () => {
      throw new Error('not used');
    },
  } as unknown as LlmClient;
}

const cutOff = () => {
  throw new LlmError('length', undefined, 'cut off at its token limit');
};

/**
 * A summary call that fails or answers something unusable must not cost the conversation any of
 * its messages: each is still in the summary (its range) or in the history the next turn's
 * agents see, and the summary stays within what the next summary prompt (and every agent's
 * system prompt) can hold.
 */
describe.each([
  ['an empty summary', () => '  '],
  ['a summary far over its length', () => 'fact '.repeat(20_000)],
  ['a summary cut off at its token limit', cutOff],
])('HistoryMaintenance when the model returns %s', (_what, answer) => {
  it('loses no message of the conversation', async () => {
    const conversations = new ConversationRepository(new MemorySessionStore(), {
      idleExpiryDays: 30,
    });
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const append = (role: 'user' | 'assistant', content: string) =>
      conversations.appendMessage(owner, id, {
        role,
        content,
        agentType: null,
        taskId: null,
        createdAt: new Date().toISOString(),
        tokens: 0,
      });
    const history = new HistoryMaintenance(modelThat(answer), conversations, new MetricsService());
    for (let turn = 0; turn < 25; turn++) {
      await append(
        'user',
        `question ${turn}: the employer withheld wages. ${'clause '.repeat(60)}`,
      );
      await append('assistant', `answer ${turn}: claim the wages. ${'advice '.repeat(60)}`);
      await history.afterTurn(owner, id, 0).catch(() => undefined);
    }
    const summary = await conversations.summary(owner, id);
    const count = await conversations.messageCount(owner, id);
    const tail = await conversations.messages(owner, id, {
      afterSeq: summary?.toSeq ?? 0,
      last: AGENT_HISTORY_BUDGET.maxMessages,
    });
    const visible = withinTokenBudget(tail, AGENT_HISTORY_BUDGET.historyTokens).length;
    expect((summary?.toSeq ?? 0) + visible).toBe(count);
    expect(countTokens(summary?.text ?? '')).toBeLessThanOrEqual(1024);
    // The earliest question is still named in what the agents are given.
    expect(summary?.text).toContain('question 0');
  });
});
