import { ConversationMessage } from '../model/conversation.model';
import { compactionRange, oldestWithinBudget, recentTurns, withinTokenBudget } from './history';
import { countTokens } from './token-counter';

const msg = (seq: number, content: string): ConversationMessage => ({
  seq,
  role: seq % 2 ? 'user' : 'assistant',
  content,
  agentType: null,
  taskId: null,
  createdAt: new Date(0).toISOString(),
  tokens: 0,
});

describe('history', () => {
  const log = Array.from({ length: 10 }, (_, i) =>
    msg(i + 1, `message number ${i + 1} `.repeat(i + 1)),
  );

  it('keeps the last N turns in order', () => {
    expect(recentTurns(log, 2).map((m) => m.seq)).toEqual([7, 8, 9, 10]);
    expect(recentTurns(log, 50)).toHaveLength(10);
  });

  it("counts turns by their user messages: a failed turn's question has no reply", () => {
    // A failed turn leaves its user message in the log without a reply (seq 3), so two user
    // messages follow each other: the last two turns are 3 (unanswered) and 4-5.
    const withFailed: ConversationMessage[] = [1, 2, 3, 4, 5].map((seq) => ({
      ...msg(seq, `m${seq}`),
      role: seq === 2 || seq === 5 ? 'assistant' : 'user',
    }));
    const turns = (n: number) => recentTurns(withFailed, n).map((m) => m.seq);
    expect(turns(1)).toEqual([4, 5]);
    expect(turns(2)).toEqual([3, 4, 5]);
    expect(turns(3)).toEqual([1, 2, 3, 4, 5]);
    expect(turns(0)).toEqual([]);
    // The newest message a failed turn's question: one turn is that question alone.
    expect(recentTurns(log.slice(0, 9), 1).map((m) => m.seq)).toEqual([9]);
  });

  it('fills a token budget newest first, in seq order, never over budget', () => {
    const budget = countTokens(log[9].content) + countTokens(log[8].content) + 1;
    const kept = withinTokenBudget(log, budget);
    expect(kept.map((m) => m.seq)).toEqual([9, 10]);
    expect(withinTokenBudget(log, 0)).toEqual([]);
    const total = kept.reduce((n, m) => n + countTokens(m.content), 0);
    expect(total).toBeLessThanOrEqual(budget);
  });

  it('counts tokens with a real BPE, not length / 4', () => {
    expect(countTokens('hello world')).toBe(2);
    expect(countTokens('我跟公司签的劳动合同有问题')).toBeGreaterThan(5);
  });

  it('asks for compaction past the threshold, keeping the newest messages', () => {
    const rule = { threshold: 30, keep: 20 };
    // Every message fits the agents' budget: the count rule alone.
    expect(compactionRange(30, 0, 30, rule)).toBeNull();
    expect(compactionRange(31, 0, 31, rule)).toEqual({ fromSeq: 1, toSeq: 11 });
    expect(compactionRange(33, 11, 22, rule)).toEqual({ fromSeq: 12, toSeq: 13 });
    expect(compactionRange(31, 11, 20, rule)).toBeNull();
  });

  it('folds what the agents would not see, below the threshold and among the kept', () => {
    const rule = { threshold: 30, keep: 20 };
    expect(compactionRange(12, 0, 8, rule)).toEqual({ fromSeq: 1, toSeq: 4 });
    expect(compactionRange(14, 4, 8, rule)).toEqual({ fromSeq: 5, toSeq: 6 });
    expect(compactionRange(34, 14, 6, rule)).toEqual({ fromSeq: 15, toSeq: 28 });
    expect(compactionRange(14, 6, 8, rule)).toBeNull();
  });

  it('folds the oldest messages within a token budget, at least one', () => {
    const m = (seq: number, tokens: number) => ({ ...msg(seq, 'x'), tokens });
    const log = [m(1, 400), m(2, 400), m(3, 400)];
    expect(oldestWithinBudget(log, 800).map((x) => x.seq)).toEqual([1, 2]);
    expect(oldestWithinBudget(log, 100).map((x) => x.seq)).toEqual([1]);
    expect(oldestWithinBudget(log, 5000).map((x) => x.seq)).toEqual([1, 2, 3]);
  });
});
