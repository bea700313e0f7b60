import { Injectable } from '@nestjs/common';
import request from 'supertest';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

const SKEW_MS = 10 * 60_000;

/**
 * This host's wall clock (Date.now() and new Date()) SKEW_MS ahead of `realNow`; timers, the
 * monotonic clock and everything else real.
 */
function runHostClockAhead(realNow: () => number): void {
  jest.useFakeTimers({
    now: realNow() + SKEW_MS,
    advanceTimers: true,
    doNotFake: [
      'hrtime',
      'nextTick',
      'performance',
      'queueMicrotask',
      'requestAnimationFrame',
      'cancelAnimationFrame',
      'requestIdleCallback',
      'cancelIdleCallback',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'setTimeout',
      'clearTimeout',
    ],
  });
}
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

/**
 * A closed task's completedAt (and a task's createdAt) are read by the recovery scan of any
 * replica, on the SharedClock: they must be written on it too. An orchestrator whose host clock
 * runs minutes ahead wrote them minutes in the future, so a leftover of that task waited that
 * much longer for the scan (and one running behind, minutes in the past: due at once).
 */
describe('task times across skewed clocks (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  const realNow = Date.now.bind(Date);
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('taskclock', {
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
  afterEach(() => jest.useRealTimers());
  afterAll(() => orch?.close());

  it('an orchestrator whose clock runs ahead writes createdAt and completedAt on the shared clock', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('olga', 'tenant-clock');
    const conv = await request(server).post('/v1/conversations').set('authorization', auth);
    // This host's wall clock (Date.now() and new Date()) ten minutes ahead; nothing else faked.
    runHostClockAhead(realNow);
    const res = await request(server)
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', auth)
      .send({ content: 'clockwise: what time is it?' });
    expect(res.status).toBe(201);
    const task = await request(server)
      .get(`/v1/tasks/${res.body.taskId}`)
      .set('authorization', auth);
    expect(task.status).toBe(200);
    // Off by seconds at most from the deployment's clock (Redis TIME), not by the host's skew.
    const offBy = (iso: string) => Math.abs(Date.parse(iso) - realNow());
    expect({
      createdAt: offBy(task.body.createdAt) < 60_000,
      completedAt: offBy(task.body.completedAt) < 60_000,
    }).toEqual({ createdAt: true, completedAt: true });
  });
});

/**
 * A conversation's messages are appended by whichever replica runs the turn: their createdAt
 * must follow their seq whatever each replica's host clock says, and so must the conversation's
 * lastActiveAt (a listing, ordered by MySQL's clock, shows it). One in-process orchestrator
 * plays two replicas: the first turn with its host clock ten minutes ahead, the second on time.
 */
describe('message times across replicas whose clocks differ (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('msgclock', {
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
  afterEach(() => jest.useRealTimers());
  afterAll(() => orch?.close());

  it("messages' createdAt go forward with their seq across replicas whose clocks differ", async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('olga', 'tenant-clock');
    const conv = await request(server).post('/v1/conversations').set('authorization', auth);
    const id = conv.body.conversationId as string;
    const realNow = Date.now.bind(Date);
    // The replica whose host clock runs ahead: Date.now() and new Date(), nothing else faked.
    runHostClockAhead(realNow);
    const first = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: 'clockwise: first question' });
    jest.useRealTimers();
    expect(first.status).toBe(201);
    const second = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: 'clockwise: second question' });
    expect(second.status).toBe(201);
    const messages = await request(server)
      .get(`/v1/conversations/${id}/messages`)
      .set('authorization', auth);
    const times = (messages.body.items as Array<{ seq: number; createdAt: string }>).map((m) =>
      Date.parse(m.createdAt),
    );
    expect(times).toHaveLength(4);
    const backwards = times.filter((t, i) => i > 0 && t < times[i - 1]);
    expect({ backwards: backwards.length }).toEqual({ backwards: 0 });
    const view = await request(server).get(`/v1/conversations/${id}`).set('authorization', auth);
    // lastActiveAt: the second turn's, on the deployment's clock, not ten minutes ahead.
    expect(Date.parse(view.body.lastActiveAt) < realNow() + 60_000).toBe(true);
  });
});

/** Writes one task-shared value, then answers. */
@Injectable()
class Shares implements AgentHandler {
  async handle(ctx: SessionContext) {
    await ctx.putSharedData('clockwise.note', 'noted');
    return { answer: 'shared in time', usage };
  }
}

/**
 * A TaskView shows the task's createdAt and completedAt on the SharedClock: its executions'
 * startedAt and completedAt (written by the orchestrator) and its shared values' updatedAt
 * (written by the agent) must be on the same clock, or a host whose wall clock runs ahead
 * shows executions that start and end minutes after their task completed.
 */
describe('execution and shared-write times across skewed clocks (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  const realNow = Date.now.bind(Date);
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('execclock', {
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'clockshare',
            description: 'shares a note, then answers',
            role: 'specialist',
            intents: ['clockshare'],
            keywords: ['clockshare'],
          },
          Shares,
          env,
        ),
      ],
    });
  });
  afterEach(() => jest.useRealTimers());
  afterAll(() => orch?.close());

  it('a host whose clock runs ahead writes execution and shared-write times on the shared clock', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('olga', 'tenant-clock');
    const conv = await request(server).post('/v1/conversations').set('authorization', auth);
    // The orchestrator's and the agent's wall clock (Date.now() and new Date()) ten minutes
    // ahead; nothing else faked.
    runHostClockAhead(realNow);
    const res = await request(server)
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', auth)
      .send({ content: 'clockshare: note the time' });
    jest.useRealTimers();
    expect(res.status === 201 ? 201 : res.body).toBe(201);
    const task = await request(server)
      .get(`/v1/tasks/${res.body.taskId}`)
      .set('authorization', auth);
    expect(task.status).toBe(200);
    const [execution] = task.body.executions as Array<{ startedAt: string; completedAt: string }>;
    // Off by seconds at most from the deployment's clock (Redis TIME), not by the host's skew.
    const offBy = (iso: string) => Math.abs(Date.parse(iso) - realNow());
    expect({
      startedAt: offBy(execution.startedAt) < 60_000,
      completedAt: offBy(execution.completedAt) < 60_000,
      sharedUpdatedAt: offBy(task.body.sharedContext['clockwise.note'].updatedAt) < 60_000,
    }).toEqual({ startedAt: true, completedAt: true, sharedUpdatedAt: true });
  });
});
