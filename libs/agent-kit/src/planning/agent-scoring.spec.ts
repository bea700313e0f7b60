import { findKeyword } from '../knowledge/keyword-match';
import { scoreAgents } from './agent-scoring';
import type { AgentDescriptor } from './planner.types';

const agent = (agentType: string, keywords: string[]): AgentDescriptor => ({
  agentType,
  description: agentType,
  role: 'specialist',
  intents: [agentType],
  keywords,
});
const LABOR = agent('labor-law', [
  '劳动',
  '劳动合同',
  '劳动法',
  '竞业',
  'employment',
  'non-compete',
]);
const CONTRACT = agent('contract-law', ['合同', '违约', '违约金', 'contract', 'clause']);
const AGENTS = [LABOR, CONTRACT];

/** The rule itself, every hit against every other: what scoreAgents must answer. */
function reference(message: string, agents: readonly AgentDescriptor[]) {
  const hits = agents.flatMap((a, owner) =>
    [...new Set(a.keywords)].flatMap((k) => findKeyword(message, k).map((h) => ({ ...h, owner }))),
  );
  const stands = (h: (typeof hits)[number]) =>
    !hits.some(
      (o) =>
        (o.end - o.start > h.end - h.start && o.start <= h.start && o.end >= h.end) ||
        (o.owner !== h.owner && o.end <= h.start && /^[\s-]*$/.test(message.slice(o.end, h.start))),
    );
  return agents.map((a, i) => {
    const keywords = [
      ...new Set(hits.filter((h) => h.owner === i && stands(h)).map((h) => h.keyword)),
    ];
    return { agent: a, score: keywords.length, keywords };
  });
}

describe('scoreAgents', () => {
  it('answers as the rule does, compared hit by hit, on messages made of keywords', () => {
    const parts = ['劳动', '合同', '劳动合同', '违约金', '竞业', ' ', '-', 'x', '。', 'employment'];
    const more = [' contract', ' clause', 'non-compete', '  ', 'contracts'];
    let seed = 7;
    const next = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    for (let round = 0; round < 500; round++) {
      const pool = round % 2 ? parts : [...parts, ...more];
      const message = Array.from({ length: 1 + next(12) }, () => pool[next(pool.length)]).join('');
      expect([message, scoreAgents(message, AGENTS)]).toEqual([
        message,
        reference(message, AGENTS),
      ]);
    }
  });

  // CJK keywords are found in the lower-cased text, where 'İ' is two units: a hit after it can
  // start past the message's end. The rule then reads the text between as message.slice does.
  it('answers as the rule does when lower-casing lengthens the text (İ)', () => {
    const messages = [
      '劳动xİİİİİİİİİİ合同',
      '违约 İİİİİİİİİİ劳动',
      'İİİİ劳动x合同',
      '劳动 İİİİİ合同',
    ];
    for (const message of messages)
      expect([message, scoreAgents(message, AGENTS)]).toEqual([
        message,
        reference(message, AGENTS),
      ]);
  });

  // Every position of this 32,000-character message (the longest content a turn takes) starts a
  // keyword of one agent or the other: 24,000 hits. Compared pairwise, each pair a regex test of
  // the text between them, they kept the orchestrator's event loop, and every tenant's requests
  // with it, busy for about 45 s. The regex tests are counted (Jest's timeout cannot stop
  // synchronous work): a budget in proportion to the text, which pairwise checks blow at once.
  it('scores a message of the longest content made of keywords in work linear in its length', () => {
    const message = '劳动合同'.repeat(8_000);
    const english = 'employment contract '.repeat(1_600);
    let tests = 0;
    const budget = 2 * (message.length + english.length);
    const test = RegExp.prototype.test;
    const spy = jest.spyOn(RegExp.prototype, 'test').mockImplementation(function (this: RegExp, s) {
      if (++tests > budget) throw new Error('over budget: pairwise comparison of hits');
      return test.call(this, s);
    });
    try {
      expect(scoreAgents(message, AGENTS).map((s) => s.keywords)).toEqual([['劳动合同'], []]);
      expect(scoreAgents(english, AGENTS).map((s) => s.keywords)).toEqual([['employment'], []]);
    } finally {
      spy.mockRestore();
    }
  });
});
