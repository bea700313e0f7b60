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

const owner = { tenantId: 'tenant-h', userId: 'user-h' };

/** A summariser with a context window: a prompt over it is refused, as a provider answers 400. */
function modelWithContext(contextTokens: number) {
  const prompts: number[] = [];
  const llm = {
    provider: 'openai',
    complete: async (req: LlmRequest) => {
      const tokens = req.messages.reduce((n, m) => n + countTokens(m.content), 0);
      prompts.push(tokens);
      if (tokens > contextTokens)
        throw new LlmError('context', 400, "the prompt is longer than the model's context");
      return {
        text: `summary ${prompts.length}`,
        model: 'm',
        usage: { promptTokens: tokens, completionTokens: 3 },
      };
    },
    stream: () => {
      throw new Error('not used');
    },
  } as unknown as LlmClient;
  return { llm, prompts };
}

describe('HistoryMaintenance over a conversation with an oversized message', () => {
  it('folds past a message larger than the model context instead of failing every turn', async () => {
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
    const { llm, prompts } = modelWithContext(8_000);
    const history = new HistoryMaintenance(llm, conversations, new MetricsService());
    // A 30,000-character question: tens of thousands of tokens, over the model's 8k context.
    await append('user', '劳动合同解除经济补偿'.repeat(3_000));
    await append('assistant', 'answer '.repeat(300));
    for (let turn = 0; turn < 8; turn++) {
      await append('user', 'question '.repeat(300));
      await append('assistant', 'answer '.repeat(300));
      await history.afterTurn(owner, id, 0);
    }
    const summary = await conversations.summary(owner, id);
    const count = await conversations.messageCount(owner, id);
    const tail = await conversations.messages(owner, id, {
      afterSeq: summary?.toSeq ?? 0,
      last: AGENT_HISTORY_BUDGET.maxMessages,
    });
    const visible = withinTokenBudget(tail, AGENT_HISTORY_BUDGET.historyTokens).length;
    // Every message is in the summary or in what the next turn's agents see, and no prompt was
    // over the model's context.
    expect((summary?.toSeq ?? 0) + visible).toBe(count);
    expect(prompts.filter((t) => t > 8_000)).toEqual([]);
  });
});

/**
 * A summariser that writes as much as it is asked to: the earlier summary restated and a fifth
 * of the new messages, or fewer tokens when the prompt names a limit. Past `maxTokens` its
 * answer is cut off (finish_reason length), refused but paid for, as OpenAiLlm reports it.
 */
function verboseModel() {
  const calls = { total: 0, cutOff: 0 };
  const llm = {
    provider: 'openai',
    complete: async (req: LlmRequest) => {
      calls.total++;
      const [system, user] = req.messages.map((m) => m.content);
      const earlier = /^Earlier summary:\n(".*")\n/.exec(user);
      const previous = earlier ? countTokens(JSON.parse(earlier[1]) as string) : 0;
      const fresh = countTokens(user.slice(user.indexOf('New messages:')));
      const limit = /at most (\d+) words/.exec(system);
      const natural = previous + Math.ceil(fresh / 5);
      const words = limit ? Math.min(natural, Number(limit[1])) : natural;
      const usage = { promptTokens: previous + fresh, completionTokens: Math.min(words, 1024) };
      if (req.maxTokens !== undefined && words > req.maxTokens) {
        calls.cutOff++;
        const error = new LlmError('length', undefined, 'cut off at its token limit');
        error.usage = usage;
        throw error;
      }
      return { text: 'fact '.repeat(words).trim(), model: 'm', usage };
    },
    stream: () => {
      throw new Error('not used');
    },
  } as unknown as LlmClient;
  return { llm, calls };
}

describe('HistoryMaintenance with a summary that grows with the conversation', () => {
  it('keeps the summary within its token cap, so it is not cut off (and paid for) every turn', async () => {
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
    const { llm, calls } = verboseModel();
    const history = new HistoryMaintenance(llm, conversations, new MetricsService());
    for (let turn = 0; turn < 60; turn++) {
      await append('user', `question ${turn}: ${'clause '.repeat(150)}`);
      await append('assistant', `answer ${turn}: ${'advice '.repeat(150)}`);
      await history.afterTurn(owner, id, 0).catch(() => undefined);
    }
    const summary = await conversations.summary(owner, id);
    const count = await conversations.messageCount(owner, id);
    const tail = await conversations.messages(owner, id, {
      afterSeq: summary?.toSeq ?? 0,
      last: AGENT_HISTORY_BUDGET.maxMessages,
    });
    const visible = withinTokenBudget(tail, AGENT_HISTORY_BUDGET.historyTokens).length;
    // Every message is in the summary or in what the next turn's agents see...
    expect((summary?.toSeq ?? 0) + visible).toBe(count);
    // ...and the summary calls are not refused turn after turn.
    expect(calls.cutOff).toBe(0);
  });
});

describe('HistoryMaintenance and PII in a long message', () => {
  // A message is folded from its first 2,000 characters, redacted: a cut through a resident id
  // left a part the redaction no longer recognised, sent to the model (a third party) and
  // free to reach the summary, which PII never does.
  it('sends the summariser no part of a resident id the 2,000-character cut went through', async () => {
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
    const prompts: string[] = [];
    const llm = {
      provider: 'openai',
      complete: async (req: LlmRequest) => {
        const text = req.messages.map((m) => m.content).join('\n');
        prompts.push(text);
        return { text: 'summary', model: 'm', usage: { promptTokens: 1, completionTokens: 1 } };
      },
      stream: () => {
        throw new Error('not used');
      },
    } as unknown as LlmClient;
    const cnId = '11010519491231002X';
    const question = `${'劳动'.repeat(992)} ${cnId} 这是我的身份证号码`;
    expect(question.indexOf(cnId)).toBe(1985);
    await append('user', question);
    for (let i = 0; i < 16; i++) {
      await append('assistant', `answer ${i}`);
      await append('user', `question ${i}`);
    }
    await new HistoryMaintenance(llm, conversations, new MetricsService()).afterTurn(owner, id, 0);
    expect(prompts.length).toBeGreaterThan(0);
    expect(prompts.join('\n')).toContain('劳动劳动');
    for (const prompt of prompts) expect(prompt).not.toContain(cnId.slice(0, 12));
  });
});
