import { Injectable } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import { emptyUsage, SessionContext, StateKeys } from '@loom/session';
import { CONSUMER_GROUP, requestStreamKey } from '../transport';
import { agentExecutePattern } from '../contracts/agent-messages';
import { AgentHandler, AgentTools } from './agent-handler';
import { answerFromContext } from './answer-from-context';

const LIMIT_MS = 1500;
const TYPED_ERROR = {
  code: 'TIMEOUT',
  message: `the execution ran past AGENT_MAX_EXECUTION_MS (${LIMIT_MS} ms) and was cancelled`,
  limit: 'total',
};

type Mode = 'model' | 'ignores' | 'winds-down-then-answers';
/** What the next execution does; what each one saw. */
let mode: Mode = 'model';
let gate: Promise<void> = Promise.resolve();
const seen: Array<{ attempt: number; aborted: boolean; reason?: unknown }> = [];
let running = 0;
let mostAtOnce = 0;
let onAbort: () => void = () => undefined;

/** Answers from its model (which never answers in time), or ignores its signal, as told. */
@Injectable()
class SlowHandler implements AgentHandler {
  async handle(ctx: SessionContext, tools: AgentTools) {
    const attempt = ctx.agent.attempts;
    running++;
    mostAtOnce = Math.max(mostAtOnce, running);
    tools.signal.addEventListener('abort', () => onAbort());
    try {
      if (mode === 'model') return await answerFromContext(ctx, tools, 'Slow specialist');
      if (mode === 'ignores') {
        await gate;
        await ctx.putSharedData('late', 'written after the execution was cancelled');
      }
      if (attempt === 1) {
        // Honours its signal, but takes a while to wind down.
        await new Promise((r) => tools.signal.addEventListener('abort', r));
        await new Promise((r) => setTimeout(r, 300));
        throw tools.signal.reason;
      }
      return { answer: 'done', usage: emptyUsage() };
    } finally {
      seen.push({ attempt, aborted: tools.signal.aborted, reason: tools.signal.reason });
      running--;
    }
  }
}

const DESCRIPTOR = {
  agentType: 'slow-specialist',
  description: 'test agent: its model never answers in time',
  role: 'specialist' as const,
  intents: ['slow-specialist'],
  keywords: [],
};

/**
 * An execution that runs past AGENT_MAX_EXECUTION_MS is cancelled: its handler's signal aborts,
 * it fails with a typed error that is recorded and answered at once, and its claim is let go.
 */
describe('agent runner: an execution past AGENT_MAX_EXECUTION_MS (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(DESCRIPTOR, SlowHandler, {
      AGENT_TIMEOUT_MS: '1000',
      AGENT_MAX_EXECUTION_MS: String(LIMIT_MS),
      LLM_OFFLINE_DELAY_MS: '600000', // its most: only the signal ends the model call
    });
  });
  afterAll(() => agent?.stop());
  beforeEach(() => {
    seen.length = 0;
    mostAtOnce = 0;
    onAbort = () => undefined;
  });

  const start = async () => {
    const task = await agent.seed(owner, [], 'question');
    const req = agent.request(owner, task);
    const { agentSessionId } = agent.signer.verify(req.assignment, DESCRIPTOR.agentType);
    const claimKey = `${agent.infra.keys.session(task.conversationId)}:claim:${agentSessionId}`;
    return { task, req, agentSessionId, claimKey };
  };
  const storedSession = (conversationId: string, agentSessionId: string) =>
    agent.tasks.agentSession(owner, conversationId, agentSessionId, true);

  it('ends a model call that never answers: failed with the typed error, acked, claim let go', async () => {
    mode = 'model';
    const { task, req, agentSessionId, claimKey } = await start();

    const error = await agent.execute(req).catch((e: unknown) => e);

    expect(error).toEqual(TYPED_ERROR);
    expect(seen).toEqual([{ attempt: 1, aborted: true, reason: expect.anything() }]);
    expect(seen[0].reason).toMatchObject({ code: 'TIMEOUT', message: TYPED_ERROR.message });
    expect(await storedSession(task.conversationId, agentSessionId)).toMatchObject({
      status: 'FAILED',
      attempts: 1,
      lastError: TYPED_ERROR.message,
    });
    const redis = agent.infra.redis!;
    expect(await redis.exists(claimKey)).toBe(0); // released, no longer renewed
    expect(await redis.exists(`${claimKey}:last`)).toBe(1); // it was taken
    // Answered and acked: nothing is left pending for another instance to run again.
    const stream = requestStreamKey(
      agent.infra.keys.prefix,
      agentExecutePattern(DESCRIPTOR.agentType),
    );
    expect(await redis.xlen(stream)).toBe(0);
    expect(((await redis.xpending(stream, CONSUMER_GROUP)) as unknown[])[0]).toBe(0);
  });

  it('answers without a handler that ignores its signal, and keeps nothing it writes later', async () => {
    mode = 'ignores';
    let open!: () => void;
    gate = new Promise((r) => (open = r));
    const { task, req, agentSessionId, claimKey } = await start();

    const error = await agent.execute(req).catch((e: unknown) => e);

    expect(error).toEqual(TYPED_ERROR);
    expect(await agent.infra.redis!.exists(claimKey)).toBe(0);
    open(); // the handler goes on and tries to write
    await new Promise<void>((r) => {
      const wait = () => (seen.length ? r() : setTimeout(wait, 20));
      wait();
    });
    expect(seen).toEqual([{ attempt: 1, aborted: true, reason: expect.anything() }]);
    const shared = await agent.infra.store.getList(
      owner,
      task.conversationId,
      StateKeys.shared(task.taskId),
    );
    expect(shared).toEqual([]);
    expect(await storedSession(task.conversationId, agentSessionId)).toMatchObject({
      status: 'FAILED',
      attempts: 1,
    });
  });

  it('runs a redelivery only once the cancelled execution has wound down', async () => {
    mode = 'winds-down-then-answers';
    const { req, agentSessionId } = await start();
    let redelivered!: Promise<unknown>;
    onAbort = () => {
      onAbort = () => undefined;
      // The same execution asked for again while the cancelled one is still winding down.
      redelivered = agent.execute(req);
    };

    const error = await agent.execute(req).catch((e: unknown) => e);

    expect(error).toEqual(TYPED_ERROR);
    expect(await redelivered).toMatchObject({ agentSessionId, output: 'done', replayed: false });
    expect(seen.map((s) => s.attempt)).toEqual([1, 2]);
    expect(mostAtOnce).toBe(1);
  });
});
