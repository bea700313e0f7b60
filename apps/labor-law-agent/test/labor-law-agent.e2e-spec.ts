import { ExecutionStatus } from '@loom/session';
import { AgentHarness } from '@loom/testing';
import { LABOR_LAW_DESCRIPTOR } from '../src/labor-law.descriptor';
import { LaborLawHandler } from '../src/labor-law.handler';

describe('labor-law agent (real Redis Streams client, real MySQL and Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(LABOR_LAW_DESCRIPTOR, LaborLawHandler);
  });
  afterAll(() => agent?.stop());

  it('answers with the conversation so far and the shared research', async () => {
    const task = await agent.seed(
      owner,
      ['我跟公司签的劳动合同有问题', '请说明具体问题。'],
      '上面那份合同里关于竞业协议的部分怎么看?',
    );
    await agent.tasks.putShared(owner, task.conversationId, task.taskId, {
      key: 'research.statutes',
      value: [{ title: { zh: '《劳动合同法》第二十三条', en: 'Labor Contract Law, Article 23' } }],
      writer: 'legal-research',
      updatedAt: new Date().toISOString(),
    });
    const result = await agent.execute(agent.request(owner, task));
    expect(result.agentType).toBe('labor-law');
    expect(result.context).toEqual({
      historyMessages: 2,
      summaryIncluded: false,
      sharedKeys: ['research.statutes'],
    });
    expect(result.output).toContain('我跟公司签的劳动合同有问题');
    expect(result.output).toContain('《劳动合同法》第二十三条');
    expect(result.replayed).toBe(false);
  });

  it('once its task recorded the execution and dropped its session, a redelivery returns the record', async () => {
    const task = await agent.seed(owner, [], '公司拖欠工资怎么办');
    await agent.tasks.putShared(owner, task.conversationId, task.taskId, {
      key: 'research.statutes',
      value: [{ title: { zh: '《劳动合同法》第三十条', en: 'Labor Contract Law, Article 30' } }],
      writer: 'legal-research',
      updatedAt: new Date().toISOString(),
    });
    const request = agent.request(owner, task);
    const { agentSessionId } = request.assignment;
    const first = await agent.execute(request);
    // As the orchestrator does when the task completes.
    const recorded = (await agent.tasks.get(owner, task.conversationId, task.taskId, true))!;
    recorded.executions = [
      {
        agentSessionId,
        agentType: first.agentType,
        status: ExecutionStatus.COMPLETED,
        attempts: 1,
        startedAt: new Date().toISOString(),
        completedAt: new Date().toISOString(),
        error: null,
        context: first.context,
        output: first.output,
        usage: first.usage,
        sharedKeysWritten: first.sharedKeysWritten,
        delivery: first.delivery,
      },
    ];
    await agent.tasks.save(owner, recorded);
    await agent.tasks.removeAgentSessions(owner, task.conversationId, [agentSessionId]);

    // It read the research and wrote nothing: a replay must not report what it saw as written.
    expect(first).toMatchObject({
      sharedKeysWritten: [],
      context: { sharedKeys: ['research.statutes'] },
    });
    expect(await agent.execute(request)).toEqual({ ...first, replayed: true });
    expect(
      await agent.tasks.agentSession(owner, task.conversationId, agentSessionId, true),
    ).toBeNull();
  });

  it('returns the stored result when the same execution is delivered again', async () => {
    const task = await agent.seed(owner, [], '公司拖欠工资怎么办');
    const request = agent.request(owner, task);
    const first = await agent.execute(request);
    const again = await agent.execute(request);
    expect(again).toEqual({ ...first, replayed: true });
    const messages = await agent.tasks.agentMessages(
      owner,
      task.conversationId,
      request.assignment.agentSessionId,
    );
    expect(messages).toHaveLength(1);
  });

  it('rejects altered, unsigned and foreign assignments with a typed error, reading nothing', async () => {
    const task = await agent.seed(owner, [], '加班费怎么算');
    const request = agent.request(owner, task);
    const altered = { ...request, assignment: { ...request.assignment, tenantId: 'tenant-b' } };
    await expect(agent.execute(altered)).rejects.toMatchObject({ code: 'ASSIGNMENT_REJECTED' });
    const unsigned = {
      ...request,
      assignment: { ...request.assignment, signature: '0'.repeat(64) },
    };
    await expect(agent.execute(unsigned)).rejects.toMatchObject({ code: 'ASSIGNMENT_REJECTED' });
    expect(
      await agent.tasks.agentSession(owner, task.conversationId, request.assignment.agentSessionId),
    ).toBeNull();
  });

  it('rejects malformed payloads with VALIDATION_FAILED, never a crash', async () => {
    await expect(agent.execute({})).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    const task = await agent.seed(owner, [], '试用期多久');
    const request = agent.request(owner, task);
    for (const bad of ['../x', 'a/b', '*', '{x}', 'x\u0000y', 'x'.repeat(10_000)]) {
      await expect(
        agent.execute({ ...request, assignment: { ...request.assignment, conversationId: bad } }),
      ).rejects.toMatchObject({
        code: 'VALIDATION_FAILED',
      });
    }
    expect((await agent.execute(request)).agentType).toBe('labor-law');
  });
});
