import { Injectable } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import {
  AgentExecutionRecord,
  emptyUsage,
  ExecutionStatus,
  LoomError,
  LoomErrorCode,
  SessionContext,
} from '@loom/session';
import { AgentHandler } from './agent-handler';

/**
 * What each next delivery does: `fail` writes `draft` and then fails, as a handler whose model
 * call broke halfway; `read` answers with what it finds in the shared context, then writes
 * `final`.
 */
const script: Array<'fail' | 'read'> = [];

@Injectable()
class HalfDoneWriter implements AgentHandler {
  async handle(ctx: SessionContext) {
    const step = script.shift() ?? 'read';
    if (step === 'fail') {
      await ctx.putSharedData('draft', `half done by ${ctx.assignment.agentSessionId}`);
      throw new LoomError(LoomErrorCode.AGENT_FAILED, 'the model call failed halfway');
    }
    const seen = Object.keys(ctx.shared).sort().join(',') || 'nothing';
    await ctx.putSharedData('final', 'complete');
    return { answer: `saw ${seen}`, usage: emptyUsage(), sharedKeysWritten: [] };
  }
}

const DESCRIPTOR = {
  agentType: 'half-done-writer',
  description: 'test agent: writes a key, then fails or answers',
  role: 'specialist' as const,
  intents: ['half-done-writer'],
  keywords: [],
};

function failed(agentSessionId: string): AgentExecutionRecord {
  return {
    agentSessionId,
    agentType: DESCRIPTOR.agentType,
    status: ExecutionStatus.FAILED,
    attempts: 1,
    startedAt: new Date().toISOString(),
    completedAt: new Date().toISOString(),
    error: { code: 'AGENT_FAILED', message: 'the model call failed halfway' },
    context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
    output: null,
    usage: emptyUsage(),
  };
}

/**
 * Task-shared data is the work of executions that succeeded: what an execution wrote before it
 * failed (or before the delivery that ran it was superseded by another) is never shown to the
 * next attempt nor to the task's reader.
 */
describe('agent runner: writes of a failed attempt (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-u', userId: 'uma' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, HalfDoneWriter, { AGENT_CLAIM_IDLE_MS: '1000' });
  });
  afterAll(() => agent?.stop());
  afterEach(() => void script.splice(0));

  it("a new execution of a step whose last one failed does not see that one's writes", async () => {
    const task = await agent.seed(owner, [], 'question');
    script.push('fail', 'read');
    const first = agent.request(owner, task);
    await expect(agent.execute(first)).rejects.toMatchObject({ code: 'AGENT_FAILED' });
    const firstId = agent.signer.verify(first.assignment, DESCRIPTOR.agentType).agentSessionId;
    // As the orchestrator records it before a retry of the task runs the step again.
    task.executions = [failed(firstId)];
    await agent.tasks.save(owner, task);

    const retried = await agent.execute(agent.request(owner, task));
    expect(retried.output).toBe('saw nothing');
    expect(retried.context.sharedKeys).toEqual(['final']);

    // The task's reader (GET /v1/tasks/:id): nothing of a running execution, then what the one
    // that succeeded wrote, never the failed one's draft.
    expect(await agent.tasks.sharedFor(owner, { task })).toEqual({});
    task.executions.push({
      ...failed(retried.agentSessionId),
      status: ExecutionStatus.COMPLETED,
      error: null,
      output: retried.output,
      delivery: retried.delivery,
    });
    await agent.tasks.save(owner, task);
    expect(Object.keys(await agent.tasks.sharedFor(owner, { task }))).toEqual(['final']);
  });

  it('a delivery of the same execution does not see what an earlier delivery of it wrote', async () => {
    const task = await agent.seed(owner, [], 'question');
    script.push('fail', 'read');
    const req = agent.request(owner, task);
    await expect(agent.execute(req)).rejects.toMatchObject({ code: 'AGENT_FAILED' });
    // The same request delivered again (its first delivery's reply lost, say): it runs anew.
    const again = await agent.execute(req);
    expect(again.output).toBe('saw nothing');
    expect(again.context.sharedKeys).toEqual(['final']);
  });
});
