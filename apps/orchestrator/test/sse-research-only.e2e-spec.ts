import { Injectable } from '@nestjs/common';
import request from 'supertest';
import { AgentHandler, AgentTools, bootstrapAgent } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };

/** A research agent that streams `<its type> found: <question>` word by word. */
const researcher = (agentType: string) => {
  @Injectable()
  class Researcher implements AgentHandler {
    async handle(ctx: SessionContext, tools: AgentTools): Promise<any> {
      const answer = `${agentType} found: ${ctx.question}`;
      for (const word of answer.split(/(?= )/)) {
        tools.onDelta?.(word);
        await new Promise((r) => setImmediate(r));
      }
      return { answer, usage };
    }
  }
  return Researcher;
};

const events = (text: string) =>
  [...text.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)].map((m) => [m[1], JSON.parse(m[2])]);

/**
 * A question no specialist matches is researched only: every research agent runs, each
 * required, and the reply is the plan's last one's answer.
 */
describe('a streamed research-only turn with two research agents (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('sseresearch', {
      agents: async (env) =>
        Promise.all(
          ['alpha-research', 'beta-research'].map((agentType) =>
            bootstrapAgent(
              {
                agentType,
                description: 'researches',
                role: 'research',
                intents: [agentType],
                keywords: [agentType],
              },
              researcher(agentType),
              env,
            ),
          ),
        ),
    });
  });
  afterAll(() => orch?.close());

  it('streams the text of the reply only, not the other research agent’s woven into it', async () => {
    const auth = orch.auth('sam', 'tenant-research');
    const id = (
      await request(orch.app.getHttpServer())
        .post('/v1/conversations')
        .set('authorization', auth)
        .send({})
    ).body.conversationId as string;
    const res = await request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .set('accept', 'text/event-stream')
      .send({ content: 'what does the law say about overtime pay' });

    const got = events(res.text);
    expect(got.at(-1)?.[0]).toBe('done');
    const { agents, reply } = got.at(-1)![1];
    expect(agents).toEqual(['alpha-research', 'beta-research']);
    expect(reply.content).toBe('beta-research found: what does the law say about overtime pay');
    expect(
      got
        .filter(([e]) => e === 'delta')
        .map(([, d]) => d.text)
        .join(''),
    ).toBe(reply.content);
  });
});
