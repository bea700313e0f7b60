import { Injectable } from '@nestjs/common';
import request from 'supertest';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { LoomError, LoomErrorCode, SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };
/** Whether the next execution breaks halfway, after its first write (a busy model: 503). */
let breakNext = true;

/** Writes a draft, then fails (busy) or answers with the shared keys it found. */
@Injectable()
class DraftingHandler implements AgentHandler {
  async handle(ctx: SessionContext) {
    const seen = Object.keys(ctx.shared).sort().join(',') || 'nothing';
    await ctx.putSharedData('draft', `by ${ctx.assignment.agentSessionId}`);
    if (breakNext) {
      breakNext = false;
      throw new LoomError(LoomErrorCode.UNAVAILABLE, 'the model is busy');
    }
    return { answer: `found ${seen}`, usage };
  }
}

/**
 * A turn that failed with 503 halfway through an agent's work, retried with its key: the retry's
 * execution and the task's reader see only what the execution that succeeded wrote.
 */
describe('task-shared data after a retried turn (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('sharedretry', {
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'drafting',
            description: 'writes a draft before it answers',
            role: 'specialist',
            intents: ['drafting'],
            keywords: ['drafting'],
          },
          DraftingHandler,
          env,
        ),
      ],
    });
  });
  afterAll(() => orch?.close());

  it('shows neither the retry nor GET /v1/tasks/:id the failed attempt’s draft', async () => {
    const auth = orch.auth('sam', 'tenant-sharedretry');
    const server = orch.app.getHttpServer();
    const conv = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({});
    const send = () =>
      request(server)
        .post(`/v1/conversations/${conv.body.conversationId}/messages`)
        .set('authorization', auth)
        .set('idempotency-key', 'draft-turn-1')
        .send({ content: 'drafting please' });
    const failed = await send();
    expect([failed.status, failed.body.code]).toEqual([503, 'UNAVAILABLE']);
    const retried = await send();
    expect(retried.status).toBe(201);
    expect(retried.body.reply.content).toBe('found nothing');
    const task = await request(server)
      .get(`/v1/tasks/${retried.body.taskId}`)
      .set('authorization', auth);
    const [first, second] = task.body.executions;
    expect([first.status, second.status]).toEqual(['FAILED', 'COMPLETED']);
    expect(task.body.sharedContext).toEqual({
      draft: {
        value: `by ${second.agentSessionId}`,
        writer: 'drafting',
        updatedAt: expect.any(String),
      },
    });
  });
});
