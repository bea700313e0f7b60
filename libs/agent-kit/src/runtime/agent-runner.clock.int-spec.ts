import { Injectable } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import { emptyUsage, ExecutionClaims, newId, SharedClock } from '@loom/session';
import { AgentHandler } from './agent-handler';

const SKEW_MS = 10 * 60_000;

@Injectable()
class Answers implements AgentHandler {
  handle() {
    return Promise.resolve({ answer: 'on time', usage: emptyUsage(), sharedKeysWritten: [] });
  }
}

const DESCRIPTOR = {
  agentType: 'clock-skewed',
  description: 'test agent: answers at once',
  role: 'specialist' as const,
  intents: ['clock-skewed'],
  keywords: [],
};

/**
 * An assignment's expiry is written by the orchestrator's host and checked by the agent's (and
 * becomes the deadline of the execution claim): an agent whose clock runs minutes ahead must
 * not refuse an assignment still valid on the deployment's clock (Redis TIME). Real Redis
 * Streams, MySQL and Redis; the agent's Date.now() skewed.
 */
describe('agent runner: assignment expiry across skewed clocks', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-c', userId: 'carol' };
  const realNow = Date.now;

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, Answers);
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(() => agent?.stop());

  it('an agent whose clock runs ahead runs an assignment valid for another minute', async () => {
    const task = await agent.seed(owner, [], 'question');
    // Signed on a correct clock: valid for a minute more.
    const req = agent.request(owner, task);
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + SKEW_MS);
    const result = await agent.execute(req);
    expect(result).toMatchObject({ output: 'on time', replayed: false });
  });

  it("an agent whose clock runs ahead waits for another delivery's claim until the real deadline", async () => {
    const conversationId = newId('c');
    const agentSessionId = newId('a');
    const infra = agent.infra;
    const first = await new ExecutionClaims(infra.redis, infra.keys, {
      ttlMs: 2000,
      pollMs: 20,
    }).acquire(conversationId, agentSessionId, realNow() + 60_000);
    // The agent's clock: the deployment's (Redis TIME), read before its host's clock went off.
    const clock = new SharedClock(infra.redis);
    await clock.sync();
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + SKEW_MS);
    const second = new ExecutionClaims(
      infra.redis,
      infra.keys,
      { ttlMs: 2000, pollMs: 20 },
      clock,
    ).acquire(conversationId, agentSessionId, realNow() + 60_000);
    const outcome = second.then(
      () => 'taken',
      (err: Error) => err.message,
    );
    setTimeout(() => void first.release(), 300);
    expect(await outcome).toBe('taken');
    await (await second).release();
  });
});
