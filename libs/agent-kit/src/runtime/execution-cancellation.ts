import { LoomError, LoomErrorCode } from '@loom/session';
import type { LlmClient } from '../llm/llm.types';
import { HandlerCancelled } from '../transport/redis-streams.options';

/**
 * How long a cancelled handler is given to settle (its model call ends at once, its own awaits
 * should too) before the runner answers without it. Meanwhile the claim is still held, so no
 * other delivery of the execution starts beside it.
 */
export const CANCEL_GRACE_MS = 1000;

/**
 * One execution's AbortSignal, handed to its handler: it aborts when the execution has run
 * `limitMs` (AGENT_MAX_EXECUTION_MS) on this agent since it started, or when the transport
 * stops waiting for it (`transport`: its caller's deadline passed, or the agent is stopping
 * past its drain). The reason is the typed error the execution then fails with.
 */
export class ExecutionCancellation {
  private readonly controller = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private unlink = (): void => undefined;

  constructor(limitMs: number, transport?: AbortSignal) {
    this.timer = setTimeout(() => this.controller.abort(limitPassed(limitMs)), limitMs);
    this.timer.unref();
    if (!transport) return;
    const stop = (): void => this.controller.abort(fromTransport(transport.reason));
    if (transport.aborted) stop();
    else {
      transport.addEventListener('abort', stop, { once: true });
      this.unlink = () => transport.removeEventListener('abort', stop);
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The execution is over: no more aborts. */
  end(): void {
    clearTimeout(this.timer);
    this.unlink();
  }
}

/**
 * What `work` (the handler) settles to while `signal` holds. Once it aborts, `work` gets
 * `graceMs` to settle, and then, whatever it did, the signal's reason is thrown: a cancelled
 * execution fails, and one that ignores its signal is not waited for (it can write nothing
 * more: its claim is released, so every write it tries is refused).
 */
export function unlessCancelled<T>(
  work: Promise<T>,
  signal: AbortSignal,
  graceMs = CANCEL_GRACE_MS,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let grace: NodeJS.Timeout | undefined;
    const settle = (done: () => void): void => {
      signal.removeEventListener('abort', cancelled);
      clearTimeout(grace);
      done();
    };
    const cancelled = (): void => {
      grace = setTimeout(() => settle(() => reject(signal.reason)), graceMs);
    };
    work.then(
      (value) => settle(() => (signal.aborted ? reject(signal.reason) : resolve(value))),
      (err: unknown) => settle(() => reject(signal.aborted ? signal.reason : err)),
    );
    if (signal.aborted) cancelled();
    else signal.addEventListener('abort', cancelled, { once: true });
  });
}

/**
 * `llm` whose every call carries `signal`: a call that brings its own (a handler's time limit
 * for it) ends when either aborts, with the reason of the first, so a cancelled execution's
 * model call ends at once whatever the handler passed.
 */
export function cancellableLlm(llm: LlmClient, signal: AbortSignal): LlmClient {
  const both = (own?: AbortSignal) => (own ? AbortSignal.any([own, signal]) : signal);
  return {
    provider: llm.provider,
    complete: (req) => llm.complete({ ...req, signal: both(req.signal) }),
    stream: (req) => llm.stream({ ...req, signal: both(req.signal) }),
  };
}

function limitPassed(limitMs: number): LoomError {
  return new LoomError(
    LoomErrorCode.TIMEOUT,
    `the execution ran past AGENT_MAX_EXECUTION_MS (${limitMs} ms) and was cancelled`,
    { limit: 'total' },
  );
}

function fromTransport(reason: unknown): LoomError {
  if (reason instanceof HandlerCancelled && reason.why === 'closing')
    return new LoomError(
      LoomErrorCode.UNAVAILABLE,
      'the agent stopped before the execution finished, and cancelled it',
    );
  return new LoomError(
    LoomErrorCode.TIMEOUT,
    "the request's deadline (AGENT_MAX_EXECUTION_MS) passed and the execution was cancelled",
    { limit: 'total' },
  );
}
