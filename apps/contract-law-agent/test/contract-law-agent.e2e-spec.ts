import { AgentHarness } from '@loom/testing';
import { CONTRACT_LAW_DESCRIPTOR } from '../src/contract-law.descriptor';
import { ContractLawHandler } from '../src/contract-law.handler';

describe('contract-law agent (real Redis Streams client, real MySQL and Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(CONTRACT_LAW_DESCRIPTOR, ContractLawHandler);
  });
  afterAll(() => agent?.stop());

  it('answers a lease question in the language asked, citing the shared statutes', async () => {
    const task = await agent.seed(
      owner,
      ['I rent a flat from a landlord', 'What is the problem?'],
      'The landlord keeps my deposit after the lease ended',
    );
    await agent.tasks.putShared(owner, task.conversationId, task.taskId, {
      key: 'research.statutes',
      value: [{ title: { zh: '《民法典》第七百零三条', en: 'Civil Code, Article 703' } }],
      writer: 'legal-research',
      updatedAt: new Date().toISOString(),
    });
    const result = await agent.execute(agent.request(owner, task, undefined, 'en'));
    expect(result.agentType).toBe('contract-law');
    expect(result.context.historyMessages).toBe(2);
    expect(result.output).toContain('Civil Code, Article 703');
    expect(result.output).toContain('I rent a flat from a landlord');
  });

  it('refuses an assignment made for another agent type', async () => {
    const task = await agent.seed(owner, [], '买卖合同违约金过高怎么办');
    const request = agent.request(owner, task);
    const signed = agent.signer.sign({
      ...owner,
      conversationId: task.conversationId,
      taskId: task.taskId,
      agentSessionId: request.assignment.agentSessionId,
      agentType: 'labor-law',
      expiresAt: Date.now() + 60_000,
    });
    await expect(agent.execute({ ...request, assignment: signed })).rejects.toMatchObject({
      code: 'ASSIGNMENT_REJECTED',
    });
    const expired = agent.signer.sign({ ...request.assignment, expiresAt: Date.now() - 1 });
    await expect(agent.execute({ ...request, assignment: expired })).rejects.toMatchObject({
      code: 'ASSIGNMENT_REJECTED',
    });
  });
});
