import { Injectable } from '@nestjs/common';
import request from 'supertest';
import { AgentHandler, AgentTools, bootstrapAgent } from '@loom/agent-kit';
import { ConversationRepository, LoomError, LoomErrorCode, SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** Answers briefly; fails a question that asks it to. */
@Injectable()
class FailOnAskHandler implements AgentHandler {
  async handle(ctx: SessionContext, _tools: AgentTools) {
    if (ctx.question.startsWith('fail'))
      throw new LoomError(LoomErrorCode.AGENT_FAILED, 'failing as asked');
    return { answer: 'noted', usage: { promptTokens: 1, completionTokens: 1, costUsd: 0 } };
  }
}

/**
 * A failed turn keeps its user message: the window of the next turn's agents then holds one
 * message more, and what it pushes out must be in the summary.
 */
describe('the summary after a failed turn (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('sumfail', {
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'fail-on-ask',
            description: 'answers briefly, fails when asked to',
            role: 'specialist',
            intents: ['fail-on-ask'],
            keywords: ['compensation'],
          },
          FailOnAskHandler,
          env,
        ),
      ],
    });
  });
  afterAll(() => orch?.close());

  it('leaves no message between the summary and the history an agent sees', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('fay', 'tenant-sumfail');
    const owner = { tenantId: 'tenant-sumfail', userId: 'fay' };
    const conversations = orch.get(ConversationRepository);
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    // About 1,200 tokens a question: the agents' 3,000-token window holds two of them.
    const long = (head: string) => `${head}: ${'compensation '.repeat(1200)}`;
    const turn = (content: string) =>
      request(server)
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', auth)
        .send({ content });

    expect((await turn(long('question 1'))).status).toBe(201); // seq 1, 2
    expect((await turn(long('question 2'))).status).toBe(201); // seq 3, 4
    expect((await turn(long('fail 3'))).status).toBe(502); // seq 5, no reply

    const summarizedTo = (await conversations.summary(owner, id))?.toSeq ?? 0;
    const next = await turn(long('question 4')); // seq 6
    expect(next.status).toBe(201);
    const task = await request(server)
      .get(`/v1/tasks/${next.body.taskId}`)
      .set('authorization', auth);
    const history = task.body.executions[0].context.historyMessages;
    // Messages 1..5 are each in the summary or in the history the agent was given.
    expect(summarizedTo + history).toBe(next.body.userMessage.seq - 1);
  });
});
