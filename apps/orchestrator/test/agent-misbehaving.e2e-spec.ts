import { Injectable } from '@nestjs/common';
import request from 'supertest';
import {
  AGENT_REGISTRY,
  AgentHandler,
  AgentRegistry,
  AgentTools,
  bootstrapAgent,
  MAX_ANSWER_CHARS,
} from '@loom/agent-kit';
import { LoomError, LoomErrorCode, SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };

/** Answers as its question says: the ways an agent written by someone else can go wrong. */
@Injectable()
class MisbehavingHandler implements AgentHandler {
  async handle(ctx: SessionContext, tools: AgentTools): Promise<any> {
    switch (ctx.question) {
      case 'many tiny deltas':
        for (let i = 0; i < 5000; i++) tools.onDelta?.(String(i % 10));
        return { answer: Array.from({ length: 5000 }, (_, i) => i % 10).join(''), usage };
      case 'deltas after it returned':
        setTimeout(() => tools.onDelta?.('late'), 20);
        return { answer: 'on time', usage };
      case 'a number':
        return { answer: 42, usage };
      case 'a blank answer':
        return { answer: '  ', usage };
      case 'a huge answer':
        return { answer: 'z'.repeat(MAX_ANSWER_CHARS + 1), usage };
      case 'a huge shared value':
        await ctx.putSharedData('big', 'b'.repeat(20_000_000));
        return { answer: 'never', usage };
      case 'a huge error':
        throw new LoomError(LoomErrorCode.AGENT_FAILED, 'y'.repeat(5_000_000));
      default:
        return { answer: `answered after ${ctx.history.length} messages`, usage };
    }
  }
}

/** Whatever an agent sends back, the turn gets a typed 502 and the conversation goes on. */
describe('an agent that misbehaves (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('misbehave', {
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'misbehaving',
            description: 'answers badly on purpose',
            role: 'specialist',
            intents: ['misbehaving'],
            keywords: ['misbehaving'],
          },
          MisbehavingHandler,
          env,
        ),
      ],
    });
  });
  afterAll(() => orch?.close());

  const turn = async (conversationId: string, content: string) =>
    request(orch.app.getHttpServer())
      .post(`/v1/conversations/${conversationId}/messages`)
      .set('authorization', orch.auth('mia', 'tenant-misbehave'))
      .send({ content });

  it.each([
    ['a number', 'the handler returned an answer that is not text (number)'],
    ['a blank answer', 'the handler returned an empty answer'],
    ['a huge answer', `the handler returned an answer over ${MAX_ANSWER_CHARS} characters`],
    ['a huge shared value', 'the value of shared key "big" is 20000002 characters of JSON'],
  ])('%s: 502 AGENT_FAILED, and the next turn answers', async (question, reason) => {
    const conv = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('mia', 'tenant-misbehave'))
      .send({});
    const id = conv.body.conversationId;
    const bad = await turn(id, question);
    expect(bad.status).toBe(502);
    expect(bad.body.code).toBe('AGENT_FAILED');
    expect(bad.body.message).toContain(reason);
    const next = await turn(id, 'hello again');
    expect(next.status).toBe(201);
    expect(next.body.reply.content).toBe('answered after 1 messages');
  });

  it('cuts an error message of megabytes before it is stored or answered', async () => {
    const conv = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('mia', 'tenant-misbehave'))
      .send({});
    const bad = await turn(conv.body.conversationId, 'a huge error');
    expect(bad.status).toBe(502);
    expect(bad.body.message.length).toBeLessThan(1_100);
    expect(bad.body.message).toMatch(/^required agent misbehaving failed: y+…$/);
  });

  it('plans around an agent that registered a malformed descriptor, and does not list it', async () => {
    const registry = orch.get<AgentRegistry>(AGENT_REGISTRY);
    // Another program's registration: no intents, no description.
    const malformed = { agentType: 'a-malformed', role: 'specialist', keywords: ['hello'] };
    await registry.heartbeat(malformed as never, 'a-malformed-1', Date.now());
    const conv = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('mia', 'tenant-misbehave'))
      .send({});
    const res = await turn(conv.body.conversationId, 'hello');
    expect(res.status).toBe(201);
    expect(res.body.agents).toEqual(['misbehaving']);
    const agents = await request(orch.app.getHttpServer())
      .get('/v1/agents')
      .set('authorization', orch.auth('mia', 'tenant-misbehave'));
    expect(agents.body.items.map((a: { agentType: string }) => a.agentType)).toEqual([
      'misbehaving',
    ]);
    await registry.remove('a-malformed', 'a-malformed-1');
  });

  it.each([
    ['many tiny deltas', Array.from({ length: 5000 }, (_, i) => i % 10).join('')],
    ['deltas after it returned', 'on time'],
  ])('streams %s as the reply reads, nothing lost and nothing after it', async (question, text) => {
    const conv = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('mia', 'tenant-misbehave'))
      .send({});
    const res = await request(orch.app.getHttpServer())
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', orch.auth('mia', 'tenant-misbehave'))
      .set('accept', 'text/event-stream')
      .send({ content: question });
    const deltas = [...res.text.matchAll(/event: delta\ndata: (.*)/g)]
      .map((m) => JSON.parse(m[1]).text as string)
      .join('');
    expect(deltas.length).toBe(text.length);
    expect(deltas).toBe(text);
    expect(res.text).toContain('event: done');
  });
});
