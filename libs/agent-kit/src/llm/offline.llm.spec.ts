import { searchStatutes } from '../knowledge/statutes';
import type { LlmContext, LlmRequest } from './llm.types';
import { OfflineLlmClient } from './offline.llm';

const Q1_ZH = '我跟公司签的劳动合同有问题';
const Q2_ZH = '上面那份合同里关于竞业协议的部分怎么看?';
const Q1_EN = 'My employment contract with my company has a problem';
const Q2_EN = 'What about the non-compete clause in that contract?';

function followUp(q1: string, q2: string): LlmContext {
  return {
    agentType: 'labor-law',
    role: '劳动法专家',
    question: q2,
    history: [
      { seq: 1, role: 'user', content: q1 },
      { seq: 2, role: 'assistant', content: 'First answer.', agentType: 'labor-law' },
      { seq: 3, role: 'user', content: q2 },
    ],
    shared: {
      'research.statutes': { value: searchStatutes(q2, { limit: 2 }), writer: 'legal-research' },
    },
  };
}

const request = (purpose: LlmRequest['purpose'], context: LlmContext): LlmRequest => ({
  purpose,
  messages: [{ role: 'user', content: context.question }],
  context,
});

describe('OfflineLlmClient', () => {
  const llm = new OfflineLlmClient();

  it('answers a follow-up from the earlier question and the shared statutes (zh)', async () => {
    const { text, usage, model } = await llm.complete(request('answer', followUp(Q1_ZH, Q2_ZH)));
    expect(text).toContain(`结合您前面提到的“${Q1_ZH}”`);
    expect(text).toContain('《劳动合同法》第二十三条');
    expect(text).toContain('《劳动合同法》第二十四条');
    expect(text).toContain('legal-research');
    expect(model).toBe('loom-offline-1');
    expect(usage.promptTokens).toBeGreaterThan(0);
    expect(usage.completionTokens).toBeGreaterThan(0);
  });

  it('answers in English when the question is English', async () => {
    const { text } = await llm.complete(request('answer', followUp(Q1_EN, Q2_EN)));
    expect(text).toContain(`Building on what you said earlier: "${Q1_EN}"`);
    expect(text).toContain('Labor Contract Law, Article 23');
    expect(text).toMatch(/^\[labor-law\]/);
  });

  it('is deterministic and streams the same text in a few chunks', async () => {
    const req = request('answer', followUp(Q1_ZH, Q2_ZH));
    const whole = await llm.complete(req);
    const streamed = llm.stream(req);
    const deltas: string[] = [];
    for await (const delta of streamed.deltas) deltas.push(delta);
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join('')).toBe(whole.text);
    expect(await streamed.result).toEqual(whole);
  });

  it('researches statutes, widening to the earlier question when the follow-up alone finds none', async () => {
    const context = { ...followUp(Q1_ZH, '那这个怎么办?'), shared: {} };
    const { text } = await llm.complete(request('research', context));
    expect(text).toContain(`结合前文“${Q1_ZH}”`);
    expect(text).toContain('《劳动合同法》第十条');
  });

  it('titles from the first question, never cutting a character in half', async () => {
    const title = await llm.complete(request('title', followUp(Q1_ZH, Q2_ZH)));
    expect(title.text).toBe(Q1_ZH);
    const long = await llm.complete(request('title', { question: '劳'.repeat(80), history: [] }));
    expect(Array.from(long.text)).toHaveLength(60);
    expect(long.text.endsWith('…')).toBe(true);
  });

  it('summarizes the covered turns and folds a previous summary', async () => {
    const first = await llm.complete(request('summarize', followUp(Q1_ZH, Q2_ZH)));
    expect(first.text).toContain(`- #1 用户:${Q1_ZH}`);
    expect(first.text).toContain('- #2 labor-law:First answer.');
    const next = await llm.complete(
      request('summarize', {
        question: '',
        summary: first.text,
        history: [{ seq: 4, role: 'user', content: '竞业补偿怎么算?' }],
      }),
    );
    expect(next.text).toContain(`- #1 用户:${Q1_ZH}`);
    expect(next.text).toContain('- #4 用户:竞业补偿怎么算?');
  });

  it('waits the configured delay', async () => {
    const slow = new OfflineLlmClient({ delayMs: 40 });
    const started = Date.now();
    await slow.complete(request('title', { question: 'hello', history: [] }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(35);
  });

  it("ends its wait (LLM_OFFLINE_DELAY_MS) when the signal aborts, with the signal's reason", async () => {
    const slow = new OfflineLlmClient({ delayMs: 86_400_000 });
    const caller = new AbortController();
    const reason = new Error('the execution was cancelled');
    const answer = request('answer', followUp(Q1_EN, Q2_EN));
    const completed = slow.complete({ ...answer, signal: caller.signal }).catch((e: unknown) => e);
    const streamed = slow.stream({ ...answer, signal: caller.signal }).result.catch((e) => e);

    caller.abort(reason);

    expect(await completed).toBe(reason);
    expect(await streamed).toBe(reason);
  });
});
