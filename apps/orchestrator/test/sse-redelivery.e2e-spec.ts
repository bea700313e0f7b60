import { Injectable, INestMicroservice } from '@nestjs/common';
import request from 'supertest';
import { AgentHandler, AgentTools, bootstrapAgent } from '@loom/agent-kit';
import { currentMdc } from '@loom/observability';
import { SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };
const descriptor = {
  agentType: 'echo',
  description: 'echoes',
  role: 'specialist' as const,
  intents: ['echo'],
  keywords: ['echo'],
};

/** Set once the first delivery has streamed the start of its answer (then it hangs). */
let firstStreamed: () => void = () => undefined;
let deliveries = 0;
/** The correlation id each delivery's handler ran under. */
const correlationIds: Array<string | undefined> = [];

/**
 * Streams `you said: <question>` in pieces. The first delivery streams only its first piece and
 * then hangs until it is cancelled (its agent stops): another instance runs the request again.
 */
@Injectable()
class OnceHangingHandler implements AgentHandler {
  async handle(ctx: SessionContext, tools: AgentTools): Promise<any> {
    const answer = `you said: ${ctx.question}`;
    const pieces = [answer.slice(0, 10), answer.slice(10, 15), answer.slice(15)];
    correlationIds.push(currentMdc().correlationId);
    if (++deliveries === 1) {
      tools.onDelta?.(pieces[0]);
      firstStreamed();
      await new Promise((_, reject) =>
        tools.signal?.addEventListener('abort', () => reject(tools.signal!.reason)),
      );
    }
    for (const piece of pieces) tools.onDelta?.(piece);
    return { answer, usage };
  }
}

const events = (text: string) =>
  [...text.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)].map((m) => [m[1], JSON.parse(m[2])]);

describe('a streamed turn whose execution is delivered again (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  let first: INestMicroservice;
  let second: INestMicroservice | undefined;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('sseredeliver', {
      // A stopped instance's request is reclaimed by another soon.
      env: { AGENT_CLAIM_IDLE_MS: '500' },
      agents: async (env) => {
        first = await bootstrapAgent(descriptor, OnceHangingHandler, env);
        // Stopped by the test, then again by orch.close(): once.
        const close = first.close.bind(first);
        let closing: Promise<void> | undefined;
        first.close = () => (closing ??= close());
        return [first];
      },
    });
  });
  afterAll(async () => {
    await second?.close();
    await orch?.close();
  });

  it('shows the answer once, not the first delivery’s start and then the whole answer again', async () => {
    const auth = orch.auth('sam', 'tenant-redeliver');
    const id = (
      await request(orch.app.getHttpServer())
        .post('/v1/conversations')
        .set('authorization', auth)
        .send({})
    ).body.conversationId as string;
    const streamed = new Promise<void>((resolve) => (firstStreamed = resolve));
    const turn = request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .set('accept', 'text/event-stream')
      .set('x-correlation-id', 'sse-redelivered-turn')
      .send({ content: 'echo this once' })
      .then((res) => res);

    await streamed;
    // Another instance takes the request over once the first one stops mid-answer.
    second = await bootstrapAgent(descriptor, OnceHangingHandler, orch.env);
    await first.close();
    const res = await turn;

    expect(deliveries).toBe(2);
    // The delivery another instance reclaimed (XAUTOCLAIM) runs under the turn's id too.
    expect(correlationIds).toEqual(['sse-redelivered-turn', 'sse-redelivered-turn']);
    const got = events(res.text);
    expect(got.at(-1)?.[0]).toBe('done');
    const reply = got.at(-1)![1].reply.content;
    expect(reply).toBe('you said: echo this once');
    const text = got
      .filter(([e]) => e === 'delta')
      .map(([, d]) => d.text)
      .join('');
    expect(text).toBe(reply);
  });
});
