import { AgentExecutionRecord, ExecutionStatus, TaskSession } from '@loom/session';
import { toErrorBody } from '../errors/http-error.filter';
import { failure } from '../turn/task-completion';
import { reopenFailedSteps, requiredFailure } from '../turn/task-executor';
import { asLoomError } from './agent-dispatcher';

/**
 * A request dead-lettered by the transport (a poison message: every delivery of it crashed or
 * stalled its consumer, to AGENT_MAX_DELIVERIES) is no passing state: a retry would run the
 * poison again. The caller gets a 502 with a code of its own, and a retry of the turn with the
 * same Idempotency-Key does not run the step again.
 */
describe('a dead-lettered agent request', () => {
  const transportError = {
    code: 'DEAD_LETTERED',
    message: 'the request was delivered 5 times without an answer',
  };

  function failedTask(): TaskSession {
    const e = asLoomError(transportError, 'labor-law');
    const record: AgentExecutionRecord = {
      agentSessionId: 'a_poisoned',
      agentType: 'labor-law',
      status: ExecutionStatus.FAILED,
      attempts: 1,
      startedAt: '2026-01-01T00:00:00.000Z',
      completedAt: '2026-01-01T00:00:01.000Z',
      error: { code: e.code, message: e.message },
      context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
      output: null,
      usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
    };
    return {
      plan: [{ agentType: 'labor-law', required: true, dependsOn: [] }],
      executions: [record],
    } as unknown as TaskSession;
  }

  it('answers 502 DEAD_LETTERED, not a 503 that tells the client to retry', () => {
    const result = requiredFailure(failedTask());
    expect(result?.ok).toBe(false);
    const body = toErrorBody(failure(result!.ok ? null : result!.error));
    expect([body.statusCode, body.code]).toEqual([502, 'DEAD_LETTERED']);
    expect(body.message).toMatch(/labor-law/);
  });

  it('is not run again by a retry of its turn', () => {
    expect(reopenFailedSteps(failedTask(), new Date(0).toISOString())).toBe(0);
  });
});
