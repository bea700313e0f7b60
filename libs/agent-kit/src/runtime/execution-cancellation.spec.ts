import { LoomError } from '@loom/session';
import { OfflineLlmClient } from '../llm/offline.llm';
import type { LlmRequest } from '../llm/llm.types';
import { HandlerCancelled } from '../transport/redis-streams.options';
import { cancellableLlm, ExecutionCancellation, unlessCancelled } from './execution-cancellation';

const never = new Promise<never>(() => undefined);

describe('ExecutionCancellation', () => {
  it('aborts at its limit with TIMEOUT, naming AGENT_MAX_EXECUTION_MS', async () => {
    const cancellation = new ExecutionCancellation(20);
    await new Promise((r) => cancellation.signal.addEventListener('abort', r));
    expect(cancellation.signal.reason).toBeInstanceOf(LoomError);
    expect(cancellation.signal.reason).toMatchObject({
      code: 'TIMEOUT',
      message: 'the execution ran past AGENT_MAX_EXECUTION_MS (20 ms) and was cancelled',
      details: { limit: 'total' },
    });
  });

  it.each([
    ['deadline', 'TIMEOUT', { limit: 'total' }],
    ['closing', 'UNAVAILABLE', undefined],
  ] as const)('aborts when the transport gives up (%s) with %s', (why, code, details) => {
    const transport = new AbortController();
    const cancellation = new ExecutionCancellation(60_000, transport.signal);
    expect(cancellation.signal.aborted).toBe(false);

    transport.abort(new HandlerCancelled(why));

    expect(cancellation.signal.reason).toMatchObject({ code, details });
    cancellation.end();
  });

  it('is not aborted by anything once ended', () => {
    const transport = new AbortController();
    const cancellation = new ExecutionCancellation(60_000, transport.signal);
    cancellation.end();
    transport.abort(new HandlerCancelled('closing'));
    expect(cancellation.signal.aborted).toBe(false);
  });
});

describe('unlessCancelled', () => {
  it('settles as the work does while the signal holds', async () => {
    const signal = new AbortController().signal;
    await expect(unlessCancelled(Promise.resolve('done'), signal)).resolves.toBe('done');
    const failure = new Error('its own failure');
    await expect(unlessCancelled(Promise.reject(failure), signal)).rejects.toBe(failure);
  });

  it("rejects with the signal's reason once the work settles after the abort, whatever it did", async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled');
    let finish!: (value: string) => void;
    const outcome = unlessCancelled(new Promise<string>((r) => (finish = r)), controller.signal);

    controller.abort(reason);
    finish('an answer after all');

    await expect(outcome).rejects.toBe(reason);
  });

  it("rejects with the signal's reason after the grace, for work that never settles", async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled');
    const outcome = unlessCancelled(never, controller.signal, 10);

    controller.abort(reason);

    await expect(outcome).rejects.toBe(reason);
  });
});

describe('cancellableLlm', () => {
  it("gives every call the execution's signal, with its own when it brings one", async () => {
    const seen: Array<AbortSignal | undefined> = [];
    const offline = new OfflineLlmClient();
    const spy = {
      provider: offline.provider,
      complete: (req: LlmRequest) => (seen.push(req.signal), offline.complete(req)),
      stream: (req: LlmRequest) => (seen.push(req.signal), offline.stream(req)),
    };
    const execution = new AbortController().signal;
    const own = new AbortController().signal;
    const llm = cancellableLlm(spy, execution);
    const req: LlmRequest = { purpose: 'title', messages: [{ role: 'user', content: 'hi' }] };

    await llm.complete(req);
    await llm.stream(req).result;
    await llm.complete({ ...req, signal: own });

    expect(seen.slice(0, 2)).toEqual([execution, execution]);
    expect(seen[2]).toBeDefined(); // the call's own signal, with the execution's
  });

  it("ends a call that brings its own signal when the execution's aborts, with its reason", async () => {
    const execution = new AbortController();
    const llm = cancellableLlm(new OfflineLlmClient({ delayMs: 60_000 }), execution.signal);
    const own = new AbortController();
    const req: LlmRequest = { purpose: 'title', messages: [{ role: 'user', content: 'hi' }] };
    const reason = new Error('the execution was cancelled');

    const call = llm.complete({ ...req, signal: own.signal }).catch((e: unknown) => e);
    const streamed = llm.stream({ ...req, signal: own.signal }).result.catch((e: unknown) => e);
    execution.abort(reason);

    expect(await call).toBe(reason);
    expect(await streamed).toBe(reason);
  });

  it('ends a call when its own signal aborts, with that reason', async () => {
    const llm = cancellableLlm(
      new OfflineLlmClient({ delayMs: 60_000 }),
      new AbortController().signal,
    );
    const own = new AbortController();
    const reason = new Error('the handler gave up');
    const call = llm
      .complete({
        purpose: 'title',
        messages: [{ role: 'user', content: 'hi' }],
        signal: own.signal,
      })
      .catch((e: unknown) => e);
    own.abort(reason);
    expect(await call).toBe(reason);
  });
});
