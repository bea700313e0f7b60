import { LoomEnv } from '@loom/agent-kit';
import {
  AgentExecutionRecord,
  ExecutionStatus,
  LoomError,
  LoomErrorCode,
  SessionInfra,
  TaskSession,
} from '@loom/session';
import {
  TaskExecutor,
  recordFirstWave,
  reopenFailedSteps,
  reportedKeys,
  reportedUsage,
  requiredFailure,
  taskUsage,
  usageToCount,
} from './task-executor';

/** When a reopened step starts (the SharedClock's now, as the retry passes it). */
const NOW = '2026-01-01T00:00:00.000Z';

const record = (
  agentType: string,
  status: ExecutionStatus,
  error: AgentExecutionRecord['error'] = null,
): AgentExecutionRecord => ({
  agentSessionId: `a_${agentType}_${status}`,
  agentType,
  status,
  attempts: 1,
  startedAt: '2026-01-01T00:00:00.000Z',
  completedAt: null,
  error,
  context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
  output: null,
  usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
});

const task = (executions: AgentExecutionRecord[]) =>
  ({
    plan: [
      { agentType: 'legal-research', required: false, dependsOn: [] },
      { agentType: 'labor-law', required: true, dependsOn: ['legal-research'] },
      { agentType: 'contract-law', required: true, dependsOn: [] },
    ],
    executions,
  }) as unknown as TaskSession;

describe('requiredFailure', () => {
  it('is null while no required step has failed (an optional one may)', () => {
    expect(requiredFailure(task([]))).toBeNull();
    expect(
      requiredFailure(
        task([record('legal-research', ExecutionStatus.FAILED, { code: 'X', message: 'x' })]),
      ),
    ).toBeNull();
  });

  it('fails on a required step whose latest record failed, in any wave, keeping 503 codes', () => {
    const timeout = { code: 'TIMEOUT', message: 'no answer' };
    expect(
      requiredFailure(
        task([
          record('contract-law', ExecutionStatus.COMPLETED),
          record('labor-law', ExecutionStatus.FAILED, timeout),
        ]),
      ),
    ).toEqual({
      ok: false,
      error: { code: 'TIMEOUT', message: 'required agent labor-law failed: no answer' },
    });
    expect(
      requiredFailure(
        task([record('contract-law', ExecutionStatus.FAILED, { code: 'BOOM', message: 'b' })]),
      ),
    ).toMatchObject({ ok: false, error: { code: 'AGENT_FAILED' } });
  });

  it('looks at the latest record of a step only: a retry that completed counts', () => {
    expect(
      requiredFailure(
        task([
          record('labor-law', ExecutionStatus.FAILED, { code: 'BOOM', message: 'b' }),
          record('labor-law', ExecutionStatus.COMPLETED),
        ]),
      ),
    ).toBeNull();
  });
});

describe('recordFirstWave', () => {
  it('records every step without dependencies as RUNNING, first attempt, own agentSessionId', () => {
    const t = task([]);
    recordFirstWave(t);
    expect(t.executions.map((e) => [e.agentType, e.status, e.attempts])).toEqual([
      ['legal-research', ExecutionStatus.RUNNING, 1],
      ['contract-law', ExecutionStatus.RUNNING, 1],
    ]);
    expect(new Set(t.executions.map((e) => e.agentSessionId)).size).toBe(2);
  });

  it('is for a new task only: one with executions is refused, not given a second record', () => {
    expect(() => recordFirstWave(task([record('contract-law', ExecutionStatus.RUNNING)]))).toThrow(
      /has executions/,
    );
  });
});

describe('taskUsage', () => {
  const costing = (r: AgentExecutionRecord, promptTokens: number, completionTokens: number) => ({
    ...r,
    usage: { promptTokens, completionTokens, costUsd: 0.5 },
  });

  it("sums the planner's call and every execution, failed ones included", () => {
    const t = task([
      costing(record('legal-research', ExecutionStatus.COMPLETED), 10, 1),
      costing(record('labor-law', ExecutionStatus.FAILED), 20, 2),
      record('contract-law', ExecutionStatus.RUNNING),
    ]);
    t.planUsage = { promptTokens: 300, completionTokens: 30, costUsd: 0 };
    expect(taskUsage(t)).toEqual({ promptTokens: 330, completionTokens: 33, costUsd: 1 });
  });

  it('is zero for a task planned without a model and not run yet', () => {
    expect(taskUsage(task([]))).toEqual({ promptTokens: 0, completionTokens: 0, costUsd: 0 });
  });
});

describe('reopenFailedSteps', () => {
  const busy = { code: 'UNAVAILABLE', message: 'the model endpoint is busy' };

  it('gives a step that failed for a passing reason a new execution, not dispatched yet; the rest stand', () => {
    const failed = record('labor-law', ExecutionStatus.FAILED, busy);
    const t = task([
      record('legal-research', ExecutionStatus.COMPLETED),
      failed,
      record('contract-law', ExecutionStatus.FAILED, { code: 'AGENT_FAILED', message: 'filter' }),
    ]);
    expect(reopenFailedSteps(t, NOW)).toBe(1);
    expect(t.executions.map((e) => [e.agentType, e.status, e.attempts])).toEqual([
      ['legal-research', ExecutionStatus.COMPLETED, 1],
      ['labor-law', ExecutionStatus.FAILED, 1],
      ['contract-law', ExecutionStatus.FAILED, 1],
      ['labor-law', ExecutionStatus.RUNNING, 0],
    ]);
    expect(t.executions[3].agentSessionId).not.toBe(failed.agentSessionId);
    expect(t.executions[3].error).toBeNull();
    expect(t.executions[3].startedAt).toBe(NOW);
    // The failed attempt no longer fails the task: the new one is what counts.
    expect(requiredFailure(t)).toMatchObject({ error: { code: 'AGENT_FAILED' } });
    t.executions.splice(2, 1);
    expect(requiredFailure(t)).toBeNull();
  });

  it('reopens a TIMEOUT too, and a step whose latest execution is not dispatched yet is left as it is', () => {
    const t = task([
      record('contract-law', ExecutionStatus.FAILED, { code: 'TIMEOUT', message: 't' }),
    ]);
    expect(reopenFailedSteps(t, NOW)).toBe(1);
    expect(reopenFailedSteps(t, NOW)).toBe(0);
    expect(t.executions.map((e) => e.status)).toEqual([
      ExecutionStatus.FAILED,
      ExecutionStatus.RUNNING,
    ]);
  });
});

describe('usageToCount', () => {
  const spent = (r: AgentExecutionRecord, promptTokens: number) => ({
    ...r,
    usage: { promptTokens, completionTokens: 1, costUsd: 0.25 },
  });

  it("is the whole task's usage, or for a retried task what came after the counted executions", () => {
    const t = task([
      spent(record('legal-research', ExecutionStatus.COMPLETED), 10),
      spent(record('labor-law', ExecutionStatus.FAILED), 20),
    ]);
    t.planUsage = { promptTokens: 300, completionTokens: 30, costUsd: 1 };
    expect(usageToCount(t)).toEqual(taskUsage(t));
    t.countedExecutions = 2;
    expect(usageToCount(t)).toEqual({ promptTokens: 0, completionTokens: 0, costUsd: 0 });
    t.executions.push(spent(record('labor-law', ExecutionStatus.COMPLETED), 40));
    expect(usageToCount(t)).toEqual({ promptTokens: 40, completionTokens: 1, costUsd: 0.25 });
  });
});

describe('reportedUsage', () => {
  it('takes whole token counts and a cost, 0 when the agent gives none', () => {
    expect(reportedUsage({ promptTokens: 12, completionTokens: 3 })).toEqual({
      promptTokens: 12,
      completionTokens: 3,
      costUsd: 0,
    });
    expect(reportedUsage({ promptTokens: 1, completionTokens: 2, costUsd: null })).toEqual({
      promptTokens: 1,
      completionTokens: 2,
      costUsd: 0,
    });
    expect(reportedUsage({ promptTokens: 0, completionTokens: 0, costUsd: 0.25 })).toEqual({
      promptTokens: 0,
      completionTokens: 0,
      costUsd: 0.25,
    });
  });

  it.each([
    ['text', { promptTokens: '12', completionTokens: 3 }],
    ['a fraction', { promptTokens: 1.5, completionTokens: 3 }],
    ['a negative count', { promptTokens: -1, completionTokens: 3 }],
    ['a count no call reaches', { promptTokens: 1e15, completionTokens: 3 }],
    ['an infinite cost', { promptTokens: 1, completionTokens: 3, costUsd: Infinity }],
    ['a missing count', { promptTokens: 1 }],
    ['nothing', undefined],
  ])('refuses %s, so it never reaches a total', (_, usage) => {
    expect(reportedUsage(usage)).toBeNull();
  });
});

describe('reportedKeys', () => {
  it('keeps the strings an agent reports, within bounds, and nothing else', () => {
    expect(reportedKeys(['b', 'a'])).toEqual(['b', 'a']);
    expect(reportedKeys(['ok', 7, null, 'x'.repeat(257)])).toEqual(['ok']);
    // Key names are identifiers: a reported "key" carrying free text (an e-mail) is left out.
    expect(reportedKeys(['ok', 'alice@example.com', 'a note', 'research.statutes'])).toEqual([
      'ok',
      'research.statutes',
    ]);
    expect(reportedKeys('research')).toEqual([]);
    expect(reportedKeys(undefined)).toEqual([]);
    expect(reportedKeys(Array.from({ length: 150 }, (_, i) => `k${i}`))).toHaveLength(100);
  });
});

// An agent's error may quote what the user wrote: the task stores it and GET /v1/tasks/:id shows
// it. With LOOM_REDACT_STORED it used to be stored as the agent said it, PII and all.
describe("TaskExecutor: a failed execution's error as stored", () => {
  const failedWith = (redact: boolean, message: string): AgentExecutionRecord => {
    const env = { LOOM_REDACT_STORED: redact } as LoomEnv;
    const infra = { redis: null, keys: { prefix: 'unit:' } } as unknown as SessionInfra;
    const args = [env, null, null, null, null, null, infra] as unknown as ConstructorParameters<
      typeof TaskExecutor
    >;
    const executor = new TaskExecutor(...args) as unknown as {
      failed(r: AgentExecutionRecord, e: LoomError, at: number): AgentExecutionRecord;
    };
    const e = new LoomError(LoomErrorCode.AGENT_FAILED, message);
    return executor.failed(record('labor-law', ExecutionStatus.RUNNING), e, 0);
  };

  it('is redacted with LOOM_REDACT_STORED, and kept as it is without', () => {
    const message = 'cannot mail alice.rowe@example.com';
    expect(failedWith(true, message).error).toEqual({
      code: 'AGENT_FAILED',
      message: 'cannot mail [REDACTED_EMAIL]',
    });
    expect(failedWith(false, message).error).toEqual({ code: 'AGENT_FAILED', message });
  });
});
