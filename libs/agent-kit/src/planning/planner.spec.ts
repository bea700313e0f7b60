import { LlmError, type LlmClient, type LlmRequest } from '../llm/llm.types';
import { Planner } from './planner';
import type { AgentDescriptor, PlanInput } from './planner.types';

const keywords = (list: string) => list.split('|');

const RESEARCH: AgentDescriptor = {
  agentType: 'legal-research',
  description: 'Finds statutes relevant to the question',
  role: 'research',
  intents: ['research'],
  keywords: [],
};
const LABOR: AgentDescriptor = {
  agentType: 'labor-law',
  description: 'Employment and labour law: labour contracts, dismissal, wages, non-compete',
  role: 'specialist',
  intents: ['labor', 'employment'],
  keywords: keywords(
    '劳动|劳动合同|公司|工资|辞退|竞业|竞业协议|社保|employment|employer|company|labor|labour|non-compete|salary|dismissal',
  ),
};
const CONTRACT: AgentDescriptor = {
  agentType: 'contract-law',
  description: 'Civil contracts: leases, sales, breach, deposits',
  role: 'specialist',
  intents: ['contract'],
  keywords: keywords(
    '合同|协议|条款|租房|租赁|押金|买卖|购买|违约|contract|clause|lease|rent|deposit|purchase|bought|breach',
  ),
};
const TAX: AgentDescriptor = {
  agentType: 'tax-law',
  description: 'Individual income tax',
  role: 'specialist',
  intents: ['tax'],
  keywords: keywords('个税|个人所得税|纳税|tax|income tax'),
};
const AGENTS = [CONTRACT, RESEARCH, LABOR];

const offline: LlmClient = {
  provider: 'offline',
  complete: () => Promise.reject(new Error('the offline planner must not call the model')),
  stream: () => {
    throw new Error('unused');
  },
};

function modelAnswering(text: string): LlmClient & { requests: LlmRequest[] } {
  const requests: LlmRequest[] = [];
  return {
    provider: 'openai',
    requests,
    complete: async (req) => {
      requests.push(req);
      return { text, model: 'fake', usage: { promptTokens: 1, completionTokens: 1 } };
    },
    stream: () => {
      throw new Error('unused');
    },
  };
}

const input = (
  message: string,
  currentIntent: string | null = null,
  agents = AGENTS,
): PlanInput => ({
  message,
  history: [],
  currentIntent,
  agents,
});

const specialistOf = (plan: { steps: Array<{ agentType: string; required: boolean }> }) =>
  plan.steps.find((step) => step.required)?.agentType;

describe('Planner (offline rules)', () => {
  const planner = new Planner(offline);

  it.each([
    ['我跟公司签的劳动合同有问题', null, 'labor-law', 'labor'],
    ['My employment contract with my company has a problem', null, 'labor-law', 'labor'],
    ['上面那份合同里关于竞业协议的部分怎么看?', 'labor', 'labor-law', 'labor'],
    ['What about the non-compete clause in that contract?', 'labor', 'labor-law', 'labor'],
    ['租房合同押金不退怎么办', null, 'contract-law', 'contract'],
    ['I bought a car and the purchase contract was breached', null, 'contract-law', 'contract'],
    ['租房合同押金不退怎么办', 'labor', 'contract-law', 'contract'],
    [
      'I bought a car and the purchase contract was breached, what can I do about it?',
      'labor',
      'contract-law',
      'contract',
    ],
  ])('routes "%s" (current intent %s) to %s', async (message, current, agentType, intent) => {
    const plan = await planner.plan(input(message, current));
    expect(specialistOf(plan)).toBe(agentType);
    expect(plan.intent).toBe(intent);
  });

  it('puts optional research first and the required specialist after it', async () => {
    const plan = await planner.plan(input('我跟公司签的劳动合同有问题'));
    expect(plan.steps).toEqual([
      { agentType: 'legal-research', required: false, dependsOn: [] },
      { agentType: 'labor-law', required: true, dependsOn: ['legal-research'] },
    ]);
    expect(plan.taskType).toBe('consultation');
    expect(plan.reason).toContain('劳动合同');
  });

  it('prefers the modifier of a compound over its generic head, with minimal keywords', async () => {
    const labor = { ...LABOR, keywords: ['劳动', 'employment', 'non-compete'] };
    const contract = { ...CONTRACT, keywords: ['合同', 'contract', 'clause'] };
    const agents = [contract, RESEARCH, labor];
    for (const message of ['我跟公司签的劳动合同有问题', 'My employment contract has a problem']) {
      expect(specialistOf(await planner.plan(input(message, null, agents)))).toBe('labor-law');
    }
    const followUp = input('What about the non-compete clause in that contract?', 'labor', agents);
    expect(specialistOf(await planner.plan(followUp))).toBe('labor-law');
  });

  it('keeps the current intent for a follow-up without a decisive keyword', async () => {
    const plan = await planner.plan(input('那赔偿大概有多少?', 'labor'));
    expect(specialistOf(plan)).toBe('labor-law');
    expect(plan.taskType).toBe('follow-up');
  });

  it('recovers the current intent from the last answering agent when none is given', async () => {
    const plan = await planner.plan({
      ...input('上面那份合同里关于竞业协议的部分怎么看?'),
      history: [
        { role: 'user', content: '我跟公司签的劳动合同有问题' },
        { role: 'assistant', content: '…', agentType: 'labor-law' },
      ],
    });
    expect(specialistOf(plan)).toBe('labor-law');
  });

  it('keeps a follow-up with the agent that answered when a deploy renamed its intents', async () => {
    // The conversation's intent is the old descriptor's; the labor-law agent now names others.
    const renamed = { ...LABOR, intents: ['labor-law', 'employment-law'] };
    const plan = await planner.plan({
      ...input('上面那份合同里关于竞业协议的部分怎么看?', 'labor', [CONTRACT, RESEARCH, renamed]),
      history: [
        { role: 'user', content: '我跟公司签的劳动合同有问题' },
        { role: 'assistant', content: '…', agentType: 'labor-law' },
      ],
    });
    expect(specialistOf(plan)).toBe('labor-law');
    expect(plan.intent).toBe('labor-law');
    expect(plan.taskType).toBe('follow-up');
  });

  it('does not stick to an intent no registered agent serves', async () => {
    const plan = await planner.plan(input('合同违约了怎么办', 'immigration'));
    expect(specialistOf(plan)).toBe('contract-law');
  });

  it('routes to an agent added only through its descriptor', async () => {
    const plan = await planner.plan(input('年终奖的个税怎么算?', null, [...AGENTS, TAX]));
    expect(specialistOf(plan)).toBe('tax-law');
    expect(plan.intent).toBe('tax');
    const english = await planner.plan(
      input('How is income tax on my bonus computed?', 'labor', [...AGENTS, TAX]),
    );
    expect(specialistOf(english)).toBe('tax-law');
  });

  it('researches only when nothing matches and no intent is current', async () => {
    const plan = await planner.plan(input('你好,我想咨询一下'));
    expect(plan).toMatchObject({ intent: 'general', taskType: 'research' });
    expect(plan.steps).toEqual([{ agentType: 'legal-research', required: true, dependsOn: [] }]);
  });
});

describe('Planner (model)', () => {
  it('uses a valid model answer', async () => {
    const llm = modelAnswering(
      '```json\n{"intent":"labor","agents":["legal-research","labor-law"]}\n```',
    );
    const plan = await new Planner(llm).plan(input('那份合同里的竞业条款呢?', 'labor'));
    expect(plan.steps.map((s) => s.agentType)).toEqual(['legal-research', 'labor-law']);
    expect(llm.requests[0].purpose).toBe('plan');
    expect(llm.requests[0].messages[0].content).toContain('contract-law');
    expect(plan.usage).toEqual({ promptTokens: 1, completionTokens: 1 });
  });

  it('drops unknown agents from an otherwise valid answer', async () => {
    const llm = modelAnswering('{"intent":"contract","agents":["ghost-agent","contract-law"]}');
    const plan = await new Planner(llm).plan(input('租房合同押金不退怎么办'));
    expect(plan.steps.map((s) => s.agentType)).toEqual(['contract-law']);
    expect(plan.reason).toContain('dropped unknown ghost-agent');
  });

  it.each([
    ['{"intent":"labor","agents":["ghost-agent"]}'],
    ['{"intent":"labor","agents":"labor-law"}'],
    ['I think labor law fits best.'],
    ['{"intent":"labor","agents":["legal-research"]}'],
  ])('falls back to the rules when the model answers %s', async (text) => {
    const plan = await new Planner(modelAnswering(text)).plan(input('我跟公司签的劳动合同有问题'));
    expect(specialistOf(plan)).toBe('labor-law');
    expect(plan.reason).toMatch(/^model answer rejected/);
    // The call was made and paid for, even though its answer was not used.
    expect(plan.usage).toEqual({ promptTokens: 1, completionTokens: 1 });
  });

  it('counts what a model answer it could not use cost (cut off at its token limit)', async () => {
    const cutOff: LlmClient = {
      ...offline,
      provider: 'openai',
      complete: async () => {
        const error = new LlmError('cut off', undefined, "the model's answer was cut off");
        error.usage = { promptTokens: 300, completionTokens: 200 };
        throw error;
      },
    };
    const plan = await new Planner(cutOff).plan(input('租房合同押金不退怎么办'));
    expect(specialistOf(plan)).toBe('contract-law');
    expect(plan.usage).toEqual({ promptTokens: 300, completionTokens: 200 });
  });

  it('falls back to the rules when the model call fails', async () => {
    const failing: LlmClient = { ...offline, provider: 'openai' };
    const plan = await new Planner(failing).plan(input('租房合同押金不退怎么办'));
    expect(specialistOf(plan)).toBe('contract-law');
    expect(plan.usage).toBeUndefined();
  });
});
