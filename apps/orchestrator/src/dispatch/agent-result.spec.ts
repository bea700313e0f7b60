import { MAX_ANSWER_CHARS } from '@loom/agent-kit';
import { LoomError } from '@loom/session';
import { checkedResult } from './agent-result';

const result = (over: Record<string, unknown>) => ({
  agentSessionId: 'a_12345678',
  agentType: 'tax-law',
  agentId: 'tax-law-1',
  output: 'an answer',
  sharedKeysWritten: [],
  context: { historyMessages: 2, summaryIncluded: true, sharedKeys: ['research.statutes'] },
  usage: { promptTokens: 1, completionTokens: 1, costUsd: 0 },
  replayed: false,
  ...over,
});

const refusal = (r: unknown) => {
  try {
    checkedResult(r, 'tax-law');
  } catch (err) {
    return LoomError.is(err) ? `${err.code} ${err.message}` : String(err);
  }
  return 'accepted';
};

/** What an agent (any program) sends back is checked before it is stored. */
describe('checkedResult', () => {
  it('refuses an answer that is not text, blank or too long, as AGENT_FAILED naming it', () => {
    expect(refusal(result({ output: 42 }))).toBe(
      'AGENT_FAILED tax-law sent an answer that is not text (number)',
    );
    expect(refusal(result({ output: undefined }))).toContain('not text (undefined)');
    expect(refusal(result({ output: { text: 'x' } }))).toContain('not text (object)');
    expect(refusal(null)).toContain('not text (undefined)');
    expect(refusal(result({ output: ' \n ' }))).toBe('AGENT_FAILED tax-law sent an empty answer');
    expect(refusal(result({ output: 'x'.repeat(MAX_ANSWER_CHARS + 1) }))).toBe(
      `AGENT_FAILED tax-law sent an answer over ${MAX_ANSWER_CHARS} characters (${MAX_ANSWER_CHARS + 1})`,
    );
    expect(refusal(result({ output: 'x'.repeat(MAX_ANSWER_CHARS) }))).toBe('accepted');
  });

  it('keeps the context report only in its documented shape', () => {
    expect(checkedResult(result({}), 'tax-law').context).toEqual({
      historyMessages: 2,
      summaryIncluded: true,
      sharedKeys: ['research.statutes'],
    });
    const odd = checkedResult(
      result({
        context: {
          historyMessages: -1,
          summaryIncluded: 'yes',
          sharedKeys: [1, 'k', 'x'.repeat(300)],
        },
        replayed: 'no',
      }),
      'tax-law',
    );
    expect(odd.context).toEqual({ historyMessages: 0, summaryIncluded: false, sharedKeys: ['k'] });
    expect(odd.replayed).toBe(false);
    expect(checkedResult(result({ context: undefined }), 'tax-law').context.sharedKeys).toEqual([]);
  });
});
