import { AgentHarness } from '@loom/testing';
import { LEGAL_RESEARCH_DESCRIPTOR } from '../src/legal-research.descriptor';
import { LegalResearchHandler, RESEARCH_KEY } from '../src/legal-research.handler';

describe('legal-research agent (real Redis Streams client, real MySQL and Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(LEGAL_RESEARCH_DESCRIPTOR, LegalResearchHandler);
  });
  afterAll(() => agent?.stop());

  it('writes the statutes it finds to task-shared context, as their writer', async () => {
    const task = await agent.seed(owner, [], '竞业限制最长多久?');
    const result = await agent.execute(agent.request(owner, task));
    expect(result.sharedKeysWritten).toEqual([RESEARCH_KEY]);
    const shared = await agent.tasks.shared(owner, task.conversationId, task.taskId);
    expect(shared[RESEARCH_KEY].writer).toBe('legal-research');
    const titles = (shared[RESEARCH_KEY].value as Array<{ title: { zh: string } }>).map(
      (s) => s.title.zh,
    );
    expect(titles).toContain('《劳动合同法》第二十四条');
  });

  it('uses the earlier questions when a follow-up names no topic', async () => {
    const task = await agent.seed(
      owner,
      ['房东不退押金怎么办', '请提供租赁合同。'],
      '那我该怎么办?',
    );
    await agent.execute(agent.request(owner, task));
    const shared = await agent.tasks.shared(owner, task.conversationId, task.taskId);
    expect((shared[RESEARCH_KEY].value as unknown[]).length).toBeGreaterThan(0);
  });
});
