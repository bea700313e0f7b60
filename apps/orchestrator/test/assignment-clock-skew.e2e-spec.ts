import { Injectable } from '@nestjs/common';
import request from 'supertest';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

const SKEW_MS = 10 * 60_000;
const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };

@Injectable()
class Answers implements AgentHandler {
  handle() {
    return Promise.resolve({ answer: 'signed in time', usage });
  }
}

/**
 * An assignment's expiry is written by the orchestrator and checked by the agent (on the
 * deployment's clock, Redis TIME): an orchestrator whose host clock runs minutes behind must
 * not sign assignments already expired. The orchestrator's Date.now() is skewed (the agents'
 * checks are on the SharedClock, so the skew is the orchestrator's alone).
 */
describe('assignment expiry across skewed clocks (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  const realNow = Date.now;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('assignclock', {
      env: { AGENT_TIMEOUT_MS: '5000', AGENT_MAX_EXECUTION_MS: '10000' },
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'clockwise',
            description: 'answers at once',
            role: 'specialist',
            intents: ['clockwise'],
            keywords: ['clockwise'],
          },
          Answers,
          env,
        ),
      ],
    });
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(() => orch?.close());

  it('an orchestrator whose clock runs behind signs assignments its agents accept', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('olga', 'tenant-clock');
    const conv = await request(server).post('/v1/conversations').set('authorization', auth);
    expect(conv.status).toBe(201);
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() - SKEW_MS);
    const res = await request(server)
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', auth)
      .send({ content: 'clockwise: are you there?' });
    expect(res.status === 201 ? 201 : res.body).toBe(201);
    expect(JSON.stringify(res.body)).toContain('signed in time');
  });
});
