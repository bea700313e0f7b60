import { Injectable } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import {
  AgentSession,
  emptyUsage,
  MAX_MEMORY_JSON_CHARS,
  newId,
  SessionContext,
  StateKeys,
  TaskSession,
} from '@loom/session';
import { AgentHandler } from './agent-handler';

/** Another tenant's running task, whose ids a compromised agent has seen in an earlier request. */
let victim: TaskSession | null = null;
const VICTIM_OWNER = { tenantId: 'tenant-victim', userId: 'vera' };

/**
 * A buggy or compromised handler: before it writes, it rewrites the ids and task type its
 * SessionContext holds (`ctx.assignment`, `ctx.task`), as plain JavaScript lets it.
 */
@Injectable()
class RetargetingHandler implements AgentHandler {
  async handle(ctx: SessionContext) {
    if (ctx.question === 'other tenant') {
      const a = ctx.assignment as unknown as {
        owner: { tenantId: string; userId: string };
        conversationId: string;
        taskId: string;
      };
      a.owner.tenantId = VICTIM_OWNER.tenantId;
      a.owner.userId = VICTIM_OWNER.userId;
      a.conversationId = victim!.conversationId;
      a.taskId = victim!.taskId;
      await ctx.putSharedData('planted', 'written from another tenant');
    } else if (ctx.question === 'retype') {
      // No rule protects `verdict` in a task of this made-up type.
      (ctx.task as { taskType: string }).taskType = 'unprotected-type';
      await ctx.putSharedData('verdict', 'forged');
    } else if (ctx.question === 'redelivery id') {
      // Its write carries the real delivery; the result would name another, which the
      // orchestrator drops as invalid: the execution then counts all of its deliveries' writes.
      await ctx.putSharedData('draft', 'this delivery');
      (ctx as unknown as { delivery: string }).delivery = 'not a delivery id!';
    } else if (ctx.question === 'big memory') {
      // Past what remember() allows, by assigning the private state directly.
      ctx.agent.localMemory = { big: 'm'.repeat(MAX_MEMORY_JSON_CHARS) };
    } else if (ctx.question === 'big messages') {
      const at = new Date().toISOString();
      ctx.agent.messages = [{ role: 'tool', content: 'x'.repeat(MAX_MEMORY_JSON_CHARS), at }];
    } else if (ctx.question === 'big tool calls') {
      const at = new Date().toISOString();
      ctx.agent.toolCalls = [
        { tool: 'search', input: 'q', output: 'y'.repeat(MAX_MEMORY_JSON_CHARS), at },
      ];
    }
    return { answer: 'done', usage: emptyUsage(), sharedKeysWritten: [] };
  }
}

/**
 * The SessionContext an agent's handler gets is the only scope it has: ids and the task type it
 * holds must not be what decides where a write lands or which ACL rule applies, whatever the
 * handler does to them.
 */
describe('agent runner: a handler that rewrites its context (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-retarget', userId: 'rita' };

  beforeAll(async () => {
    agent = await AgentHarness.start(
      {
        agentType: 'retargeting',
        description: 'test agent: rewrites its context, then writes',
        role: 'specialist',
        intents: ['retargeting'],
        keywords: [],
      },
      RetargetingHandler,
      { LOOM_SHARED_ACL: JSON.stringify({ consultation: { verdict: ['judge'] } }) },
    );
  });
  afterAll(() => agent?.stop());

  it("writes nothing into another tenant's task after rewriting ctx.assignment", async () => {
    victim = await agent.seed(VICTIM_OWNER, [], 'a question of the victim');
    const task = await agent.seed(owner, [], 'other tenant');
    const failed = await agent.execute(agent.request(owner, task)).then(
      () => null,
      (err: unknown) => err as { code: string },
    );
    const planted = await agent.infra.store.getList(
      VICTIM_OWNER,
      victim.conversationId,
      StateKeys.shared(victim.taskId),
    );
    expect(planted).toEqual([]);
    expect(failed?.code).toBe('AGENT_FAILED');
  });

  it('keeps a protected key from a writer that changed ctx.task.taskType', async () => {
    const task = await agent.seed(owner, [], 'retype');
    const failed = await agent.execute(agent.request(owner, task)).then(
      () => null,
      (err: unknown) => err as { code: string },
    );
    const written = await agent.infra.store.getList(
      owner,
      task.conversationId,
      StateKeys.shared(task.taskId),
    );
    expect(written).toEqual([]);
    expect(failed).not.toBeNull();
  });

  it('keeps ctx.delivery as the runner made it: assigning it fails the execution', async () => {
    const task = await agent.seed(owner, [], 'redelivery id');
    const outcome = await agent.execute(agent.request(owner, task)).then(
      (result) => ({ delivery: result.delivery, code: null }),
      (err: unknown) => ({ delivery: null, code: (err as { code: string }).code }),
    );
    expect(outcome).toEqual({ delivery: null, code: 'AGENT_FAILED' });
  });

  it.each([
    ['big memory', 'private memory'],
    ['big messages', 'private messages'],
    ['big tool calls', 'tool calls'],
  ])('stores nothing of private state over its limit (%s): AGENT_FAILED', async (q, what) => {
    const task = await agent.seed(owner, [], q);
    const agentSessionId = newId('a');
    const failed = await agent.execute(agent.request(owner, task, agentSessionId)).then(
      () => null,
      (err: unknown) => err as { code: string; message: string },
    );
    expect(failed?.code).toBe('AGENT_FAILED');
    expect(failed?.message).toContain(what);
    const stored = await agent.infra.store.get<AgentSession>(
      owner,
      task.conversationId,
      StateKeys.agent(agentSessionId),
    );
    expect(stored?.status).toBe('FAILED');
    expect(JSON.stringify(stored).length).toBeLessThan(MAX_MEMORY_JSON_CHARS);
  });
});
