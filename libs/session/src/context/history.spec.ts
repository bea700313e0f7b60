import { ConversationMessage } from '../model/conversation.model';
import { needsCompaction, recentTurns, truncateRuneSafe, withinTokenBudget } from './history';
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

  it('truncates titles without splitting characters', () => {
    expect(truncateRuneSafe('劳动合同竞业限制问题咨询', 6)).toBe('劳动合同竞…');
    const emoji = '👩‍⚖️'.repeat(5);
    expect(Array.from(truncateRuneSafe(emoji, 3)).join('')).toBe('👩‍⚖️👩‍⚖️…');
    expect(truncateRuneSafe('short', 60)).toBe('short');
  });

  it('asks for compaction past the threshold, keeping the newest messages', () => {
    expect(needsCompaction(30, 0, 30, 20)).toBeNull();
    expect(needsCompaction(31, 0, 30, 20)).toEqual({ fromSeq: 1, toSeq: 11 });
    expect(needsCompaction(33, 11, 30, 20)).toEqual({ fromSeq: 12, toSeq: 13 });
    expect(needsCompaction(31, 11, 30, 20)).toBeNull();
  });
});
