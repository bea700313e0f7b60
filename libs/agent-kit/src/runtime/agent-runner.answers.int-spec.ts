import { Injectable } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { ClsService } from 'nestjs-cls';
import { LoomClsStore } from '@loom/observability';
import { AgentHarness } from '@loom/testing';
import {
  emptyUsage,
  ExecutionStatus,
  MAX_SHARED_VALUE_JSON_CHARS,
  newId,
  SessionContext,
} from '@loom/session';
import { MAX_ANSWER_CHARS } from '../contracts/agent-messages';
import { AgentHandler, AgentTools } from './agent-handler';

const SPENT = { promptTokens: 1200, completionTokens: 30_000, costUsd: 0.5 };

/** An object that contains itself: JSON cannot write it. */
function selfContaining(fields: Record<string, unknown>): Record<string, unknown> {
  const o: Record<string, unknown> = { ...fields };
  o.self = o;
  return o;
}

/** Answers as its question says: what a handler written by someone else may return or throw. */
@Injectable()
class CarelessHandler implements AgentHandler {
  constructor(private readonly cls: ClsService<LoomClsStore>) {}

  async handle(ctx: SessionContext, tools: AgentTools): Promise<any> {
    const usage = emptyUsage();
    const askModel = () =>
      tools.llm.complete({
        purpose: 'answer',
        messages: [{ role: 'user', content: ctx.question }],
      });
    switch (ctx.question) {
      case 'nothing':
        return undefined;
      case 'a number':
        return { answer: 42, usage };
      case 'a blank answer':
        return { answer: ' \n', usage };
      case 'a huge answer':
        return { answer: 'z'.repeat(MAX_ANSWER_CHARS + 1), usage };
      case 'a huge answer that cost':
        return { answer: 'z'.repeat(MAX_ANSWER_CHARS + 1), usage: SPENT };
      case 'a thrown bare object':
        throw Object.create(null);
      case 'a thrown RpcException that contains itself':
        throw new RpcException(selfContaining({ code: 'AGENT_FAILED', message: 'my tool broke' }));
      case 'no answer, with a usage that contains itself':
        return { answer: '', usage: selfContaining({ promptTokens: 1 }) };
      case 'a model call, then a throw':
        await askModel();
        throw new Error('post-processing failed');
      case 'a model call, then a shared value too large':
        await ctx.putSharedData(
          'draft',
          (await askModel()).text.padEnd(MAX_SHARED_VALUE_JSON_CHARS),
        );
        return { answer: 'fine', usage };
      case 'my correlation id':
        return { answer: `correlation id: ${this.cls.get('correlationId') ?? 'none'}`, usage };
      case 'a redirected session':
        // Its own session's ids changed: the save must still go to the assigned one.
        Object.assign(ctx.agent, {
          agentSessionId: 'a_someoneelse0001',
          taskId: 't_someoneelse01',
        });
        return { answer: 'fine', usage };
      default:
        return { answer: 'fine', usage };
    }
  }
}

/** The kit tells a handler's author what was wrong with what it returned, and records it. */
describe('AgentRunner and what a handler returns (real Redis Streams, MySQL)', () => {
  let harness: AgentHarness;
  const owner = { tenantId: 'tenant-careless', userId: 'carl' };

  beforeAll(async () => {
    harness = await AgentHarness.start(
      {
        agentType: 'careless',
        description: 'test agent: returns what its question says',
        role: 'specialist',
        intents: ['careless'],
        keywords: [],
      },
      CarelessHandler,
    );
  });
  afterAll(() => harness?.stop());

  it.each([
    ['nothing', 'the handler returned undefined, not { answer, usage }'],
    ['a number', 'the handler returned an answer that is not text (number)'],
    ['a blank answer', 'the handler returned an empty answer'],
    ['a huge answer', `the handler returned an answer over ${MAX_ANSWER_CHARS} characters`],
    ['a thrown bare object', 'the agent failed'],
    // What JSON cannot write must still be answered, not leave the caller waiting for a reply.
    ['a thrown RpcException that contains itself', 'my tool broke'],
    ['no answer, with a usage that contains itself', 'the handler returned an empty answer'],
  ])('%s: AGENT_FAILED, recorded on its agent session', async (question, message) => {
    const task = await harness.seed(owner, [], question);
    const agentSessionId = newId('a');
    await expect(
      harness.execute(harness.request(owner, task, agentSessionId, 'en')),
    ).rejects.toMatchObject({ code: 'AGENT_FAILED', message: expect.stringContaining(message) });
    const session = await harness.tasks.agentSession(owner, task.conversationId, agentSessionId);
    expect(session).toMatchObject({ status: ExecutionStatus.FAILED });
    expect(session!.lastError!.length).toBeLessThan(200);
  });

  it('reports what a refused answer cost, so the orchestrator counts it', async () => {
    const task = await harness.seed(owner, [], 'a huge answer that cost');
    await expect(
      harness.execute(harness.request(owner, task, newId('a'), 'en')),
    ).rejects.toMatchObject({ code: 'AGENT_FAILED', usage: SPENT });
  });

  it.each([
    ['a model call, then a throw', 'AGENT_FAILED'],
    ['a model call, then a shared value too large', 'PAYLOAD_TOO_LARGE'],
  ])(
    '%s: reports what its model calls cost, so the orchestrator counts it',
    async (question, code) => {
      const task = await harness.seed(owner, [], question);
      const error = await harness
        .execute(harness.request(owner, task, newId('a'), 'en'))
        .catch((e: unknown) => e as { code: string; usage?: Record<string, number> });
      expect(error).toMatchObject({ code });
      expect(error.usage).toEqual({
        promptTokens: expect.any(Number),
        completionTokens: expect.any(Number),
        costUsd: 0,
      });
      expect(error.usage!.promptTokens).toBeGreaterThan(0);
      expect(error.usage!.completionTokens).toBeGreaterThan(0);
    },
  );

  it('stores the agent session where the assignment says, whatever the handler did to its ids', async () => {
    const task = await harness.seed(owner, [], 'a redirected session');
    const agentSessionId = newId('a');
    await harness.execute(harness.request(owner, task, agentSessionId, 'en'));
    const session = await harness.tasks.agentSession(owner, task.conversationId, agentSessionId);
    expect(session).toMatchObject({
      agentSessionId,
      taskId: task.taskId,
      status: ExecutionStatus.COMPLETED,
    });
    expect(
      await harness.tasks.agentSession(owner, task.conversationId, 'a_someoneelse0001'),
    ).toBeNull();
  });

  it("logs under the request's correlation id only when it is well-formed", async () => {
    const task = await harness.seed(owner, [], 'my correlation id');
    const asked = (correlationId: string) => {
      const req = harness.request(owner, task, newId('a'), 'en');
      return harness.execute({ ...req, meta: { ...req.meta, correlationId } });
    };
    expect((await asked('r_fine-123')).output).toBe('correlation id: r_fine-123');
    // `meta` is not signed: a forged one must not put a line break or spaces in every log line.
    expect((await asked('forged\n{"level":"fatal"} x')).output).toBe('correlation id: none');
  });
});
