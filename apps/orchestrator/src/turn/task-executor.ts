import { Inject, Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { DeltaChannel, ExecuteAgentResult, LOOM_ENV, LoomEnv } from '@loom/agent-kit';
import { AssignmentSigner, redactPii } from '@loom/security';
import {
  SESSION_INFRA,
  SessionInfra,
  addUsage,
  AgentExecutionRecord,
  emptyUsage,
  ExecutionStatus,
  LoomError,
  LoomErrorCode,
  newId,
  Owner,
  PlanStep,
  SHARED_KEY_PATTERN,
  TaskRepository,
  TaskSession,
  Usage,
} from '@loom/session';
import { LoomClsStore } from '@loom/observability';
import { AgentDispatcher } from '../dispatch/agent-dispatcher';
import { checkedResult } from '../dispatch/agent-result';
import { AgentCatalog } from './agent-catalog';
import { TaskRun } from './task-run';

export interface TaskOutcome {
  reply: string;
  answeredBy: string | null;
  usage: Usage;
}

export type TaskResult =
  | { ok: true; outcome: TaskOutcome }
  | { ok: false; error: { code: string; message: string; retryAfterS?: number } };

/** Failures of these codes keep their code (503); any other agent failure is AGENT_FAILED. */
const PASS_THROUGH = new Set<string>([LoomErrorCode.TIMEOUT, LoomErrorCode.UNAVAILABLE]);

/** A failure of the platform's passing state (503: retry), not the agent's or model's own. */
export const transientFailure = (error: { code: string } | null | undefined): boolean =>
  PASS_THROUGH.has(error?.code ?? '');

/**
 * The code a failed step's error keeps for the caller: a passing failure's (503), a
 * dead-lettered request's (502 DEAD_LETTERED: for good, like AGENT_FAILED, but named), else
 * AGENT_FAILED.
 */
export function failureCode(error: { code: string } | null | undefined): LoomErrorCode {
  if (transientFailure(error) || error?.code === LoomErrorCode.DEAD_LETTERED)
    return error!.code as LoomErrorCode;
  return LoomErrorCode.AGENT_FAILED;
}

/**
 * Runs a task's plan from its last checkpoint: every step whose dependencies have settled runs
 * now, independent ones in parallel (a wave). Before a wave is dispatched, one checkpoint records
 * its steps as RUNNING with their agentSessionIds together with the previous wave's results; the
 * last wave's results are written when the task completes or fails. A resumed task skips settled
 * steps and re-dispatches a RUNNING one under the same agentSessionId, and an agent that already
 * finished it returns its stored result instead of working twice. A required failure fails the
 * task; an optional one is skipped.
 */
@Injectable()
export class TaskExecutor implements OnApplicationShutdown {
  private readonly log = new Logger('TaskExecutor');

  constructor(
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly dispatcher: AgentDispatcher,
    private readonly signer: AssignmentSigner,
    private readonly cls: ClsService<LoomClsStore>,
    private readonly catalog: AgentCatalog,
    private readonly tasks: TaskRepository,
    @Inject(SESSION_INFRA) infra: SessionInfra,
  ) {
    this.deltas = new DeltaChannel(infra.redis, infra.keys.prefix);
  }

  private readonly deltas: DeltaChannel;

  /** Closes the delta readers this process opened (their connections would keep it alive). */
  async onApplicationShutdown(): Promise<void> {
    await this.deltas.close();
  }

  /**
   * `firstWaveSaved`: the task was created with `recordFirstWave()` already applied, so the
   * first wave is dispatched as recorded, without a checkpoint that would only repeat it.
   */
  async run(
    run: TaskRun,
    language: 'zh' | 'en',
    { firstWaveSaved = false }: { firstWaveSaved?: boolean } = {},
  ): Promise<TaskResult> {
    const { task } = run;
    const settled = new Set(
      task.plan
        .filter((s) => {
          const status = latest(task, s.agentType)?.status;
          return status !== undefined && status !== ExecutionStatus.RUNNING;
        })
        .map((s) => s.agentType),
    );
    // A resumed task may carry a required step that already failed: it fails now, not with a
    // reply made of the other steps.
    const before = requiredFailure(task);
    if (before) return before;
    for (let first = true; ; first = false) {
      const wave = nextWave(task, settled);
      if (wave.length === 0) break;
      // One checkpoint per wave: the previous wave's results and this wave's RUNNING records
      // (their agentSessionIds) land together, before this wave is dispatched. A first wave the
      // task was created with is dispatched as recorded.
      const recorded = wave.map((step) => latest(task, step.agentType));
      const saved =
        first &&
        firstWaveSaved &&
        recorded.every((r) => r?.status === ExecutionStatus.RUNNING && r.attempts === 1);
      const records = saved
        ? (recorded as AgentExecutionRecord[])
        : wave.map((step) => dispatchRecord(task, step, new Date(run.now()).toISOString()));
      if (!saved) {
        records.forEach((record) => put(task, record));
        await run.checkpoint();
      }
      await Promise.all(
        wave.map(async (step, i) => {
          put(task, await this.execute(run, records[i], language));
          settled.add(step.agentType);
        }),
      );
      const failure = requiredFailure(task);
      if (failure) return failure;
    }
    return { ok: true, outcome: this.outcome(task, language) };
  }

  /** The reply is the last completed required step's output (else any completed step's). */
  private outcome(task: TaskSession, language: 'zh' | 'en'): TaskOutcome {
    let reply: string | null = null;
    let answeredBy: string | null = null;
    for (const step of task.plan) {
      const record = latest(task, step.agentType);
      if (record?.status !== ExecutionStatus.COMPLETED) continue;
      if (step.required || reply === null) {
        reply = record.output;
        answeredBy = step.agentType;
      }
    }
    return {
      reply:
        reply ??
        (language === 'zh'
          ? '抱歉，目前没有可用的专家来回答这个问题。'
          : 'Sorry, no specialist is available for this question right now.'),
      answeredBy,
      usage: usageToCount(task),
    };
  }

  private unreadable(agentType: string, usage: unknown): Usage {
    this.log.warn(`${agentType} reported unreadable usage ${JSON.stringify(usage)?.slice(0, 200)}`);
    return emptyUsage();
  }

  private async execute(
    run: TaskRun,
    record: AgentExecutionRecord,
    language: 'zh' | 'en',
  ): Promise<AgentExecutionRecord> {
    const { owner, task } = run;
    const { agentSessionId, agentType } = record;
    // Planned before its type was retired (a recovered or retried task): no instance will ever
    // take the request, so it fails now, as the command failed the requests already queued,
    // rather than wait AGENT_TIMEOUT_MS for a 503 that invites retries of the same wait. A check
    // that fails (the store away) only means: dispatch as usual.
    if (await this.catalog.retiredNow(agentType).catch(() => false))
      return this.failed(
        record,
        new LoomError(LoomErrorCode.AGENT_FAILED, `${agentType} was retired`),
        run.now(),
      );
    // Dispatched before (its task interrupted): its agent may have finished it and stored the
    // result, then stopped. Taken from the store, the task needs no live instance for work that
    // is done; asked again, it would wait AGENT_TIMEOUT_MS for one and fail, and the retry would
    // run the work a second time under a new agentSessionId.
    const finished = record.attempts > 1 && (await this.storedResult(owner, task, record));
    if (finished) {
      this.log.log(`${agentType} had finished: its stored result`);
      return this.completed(record, finished, run.now());
    }
    const assignment = this.signer.sign({
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: task.conversationId,
      taskId: task.taskId,
      agentSessionId,
      agentType,
      // A delivery may start (a reclaim) until the call's limit: the assignment must still hold.
      // On the deployment's clock, as the agent checks it.
      expiresAt: this.signer.expiresIn(
        Math.max(this.env.AGENT_TIMEOUT_MS * 2, this.env.AGENT_MAX_EXECUTION_MS),
      ),
    });
    const meta = {
      correlationId: this.cls.get('correlationId') ?? newId('r'),
      tenantId: owner.tenantId,
      conversationId: task.conversationId,
      taskId: task.taskId,
      agentType,
    };
    // The reply is the last required step's answer (see outcome(): every required step completed
    // for there to be one): an SSE client sees its text as the model writes it, and only its.
    // Several required steps (a research-only plan) run side by side, and their texts would mix.
    const streamed =
      run.onDelta && task.plan.filter((s) => s.required).at(-1)?.agentType === agentType;
    const onDelta = run.onDelta;
    const subscription =
      streamed && onDelta
        ? this.deltas.subscribe(task.conversationId, agentSessionId, (t) => onDelta(agentType, t))
        : null;
    try {
      const result = await this.dispatcher
        .execute(agentType, { assignment, meta, language, stream: streamed ? true : undefined })
        .finally(() => subscription?.stop());
      this.log.log(
        `${agentType} answered (${result.context.historyMessages} history messages` +
          `${result.replayed ? ', stored result' : ''})`,
      );
      return this.completed(record, result, run.now());
    } catch (err) {
      const e = LoomError.is(err)
        ? err
        : new LoomError(LoomErrorCode.AGENT_FAILED, 'agent call failed');
      return this.failed(record, e, run.now());
    }
  }

  /**
   * The result an execution's agent stored with its agent session, checked as an answer is,
   * when it finished; null when it did not (or it cannot be read: the agent is asked then).
   */
  private async storedResult(
    owner: Owner,
    task: TaskSession,
    record: AgentExecutionRecord,
  ): Promise<ExecuteAgentResult | null> {
    try {
      const { agentSessionId, agentType } = record;
      const session = await this.tasks.agentSession(
        owner,
        task.conversationId,
        agentSessionId,
        true,
      );
      if (
        session?.status !== ExecutionStatus.COMPLETED ||
        !session.output ||
        session.taskId !== task.taskId ||
        session.agentType !== agentType
      )
        return null;
      return { ...checkedResult(session.output, agentType), replayed: true };
    } catch {
      return null;
    }
  }

  /** `at`: when, on the SharedClock (run.now()), as the task's own times are written. */
  private completed(
    record: AgentExecutionRecord,
    result: ExecuteAgentResult,
    at: number,
  ): AgentExecutionRecord {
    return {
      ...record,
      status: ExecutionStatus.COMPLETED,
      completedAt: new Date(at).toISOString(),
      error: null,
      context: result.context,
      output: result.output,
      sharedKeysWritten: reportedKeys(result.sharedKeysWritten),
      usage: reportedUsage(result.usage) ?? this.unreadable(record.agentType, result.usage),
      ...reportedDelivery(result.delivery),
    };
  }

  private failed(record: AgentExecutionRecord, e: LoomError, at: number): AgentExecutionRecord {
    this.log.warn(`${record.agentType} failed: ${e.code} ${e.message}`);
    return {
      ...record,
      status: ExecutionStatus.FAILED,
      completedAt: new Date(at).toISOString(),
      // It may quote what the user wrote: stored (and shown) redacted with LOOM_REDACT_STORED.
      error: {
        code: e.code,
        message: this.env.LOOM_REDACT_STORED ? redactPii(e.message) : e.message,
        ...(typeof e.details?.retryAfterS === 'number'
          ? { retryAfterS: e.details.retryAfterS }
          : {}),
      },
      output: null,
      usage: reportedUsage(e.details?.usage) ?? record.usage,
    };
  }
}

/**
 * What a task's model calls cost: the planner's, and every execution's, failed ones included
 * (an agent that threw its model's answer away reports what it cost).
 */
export function taskUsage(task: TaskSession): Usage {
  const spent = task.executions.map((e) => e.usage);
  return (task.planUsage ? [task.planUsage, ...spent] : spent).reduce(addUsage, emptyUsage());
}

/**
 * What the conversation's usage does not count yet of a task that ends now: all of it, or, for
 * a task retried after it failed, what it spent since (`countedExecutions`).
 */
export function usageToCount(task: TaskSession): Usage {
  if (task.countedExecutions === undefined) return taskUsage(task);
  return task.executions
    .slice(task.countedExecutions)
    .map((e) => e.usage)
    .reduce(addUsage, emptyUsage());
}

/**
 * The executions a retry of a failed task replaces: each step's last one, when it failed for a
 * passing reason (`transientFailure`).
 */
export function replacedExecutions(task: TaskSession): AgentExecutionRecord[] {
  return task.plan
    .map((step) => latest(task, step.agentType))
    .filter(
      (last): last is AgentExecutionRecord =>
        last?.status === ExecutionStatus.FAILED && transientFailure(last.error),
    );
}

/**
 * A failed task taken up again (its Idempotency-Key retried): every step whose last execution
 * it replaces (`replacedExecutions`) gets a new one under a new agentSessionId (an agent
 * refuses to run one its task recorded as failed), RUNNING with no attempt yet: a resume
 * dispatches it as it dispatches an interrupted one. Completed steps stand, and so does an
 * agent's own failure. Returns how many steps get a new execution.
 */
export function reopenFailedSteps(task: TaskSession, now: string): number {
  const replaced = new Set(replacedExecutions(task).map((e) => e.agentType));
  for (const step of task.plan)
    if (replaced.has(step.agentType))
      put(task, { ...dispatchRecord(task, step, now), attempts: 0 });
  return replaced.size;
}

/**
 * A new task's first wave as RUNNING records, put into the task before it is first saved: the
 * task is then created with what its first checkpoint would write (run with firstWaveSaved).
 */
export function recordFirstWave(task: TaskSession): void {
  if (task.executions.length > 0) throw new Error('recordFirstWave: the task has executions');
  for (const step of nextWave(task, new Set()))
    put(task, dispatchRecord(task, step, task.createdAt));
}

/** Steps not settled yet whose dependencies all have. */
function nextWave(task: TaskSession, settled: Set<string>): PlanStep[] {
  return task.plan.filter(
    (s) => !settled.has(s.agentType) && s.dependsOn.every((d) => settled.has(d)),
  );
}

/**
 * A step's record as it is dispatched: an interrupted one again (same agentSessionId), else new,
 * started `now` (ISO, on the SharedClock the task's own times are written on).
 */
function dispatchRecord(task: TaskSession, step: PlanStep, now: string): AgentExecutionRecord {
  const interrupted = latest(task, step.agentType);
  if (interrupted?.status === ExecutionStatus.RUNNING)
    return { ...interrupted, attempts: interrupted.attempts + 1 };
  return {
    agentSessionId: newId('a'),
    agentType: step.agentType,
    status: ExecutionStatus.RUNNING,
    attempts: 1,
    startedAt: now,
    completedAt: null,
    error: null,
    context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
    output: null,
    usage: emptyUsage(),
  };
}

/** The task's result when a required step's latest execution failed, else null. */
export function requiredFailure(task: TaskSession): TaskResult | null {
  const failed = task.plan.find(
    (s) => s.required && latest(task, s.agentType)?.status === ExecutionStatus.FAILED,
  );
  if (!failed) return null;
  const error = latest(task, failed.agentType)!.error;
  return {
    ok: false,
    error: {
      code: failureCode(error),
      message: `required agent ${failed.agentType} failed: ${error?.message ?? 'unknown error'}`,
      ...(error?.retryAfterS !== undefined ? { retryAfterS: error.retryAfterS } : {}),
    },
  };
}

/** Per model call: far above any model's window, low enough that sums stay exact. */
const MAX_TOKENS_PER_CALL = 100_000_000;

/**
 * The usage an agent reported (with its answer, or its error), when it is one: token counts
 * as whole numbers within bounds, a cost when given (0 when not). An agent is another
 * process: what it sends is checked before it is added into a conversation's totals.
 */
export function reportedUsage(u: unknown): Usage | null {
  const { promptTokens, completionTokens, costUsd: reported } = (u ?? {}) as Partial<Usage>;
  const costUsd = reported ?? 0; // null (JSON of a NaN) or absent: not priced
  const tokens = (n: unknown): n is number =>
    Number.isSafeInteger(n) && (n as number) >= 0 && (n as number) <= MAX_TOKENS_PER_CALL;
  const cost = typeof costUsd === 'number' && Number.isFinite(costUsd) && costUsd >= 0;
  return tokens(promptTokens) && tokens(completionTokens) && cost && costUsd <= 1e6
    ? { promptTokens, completionTokens, costUsd }
    : null;
}

/** The shared keys an agent says it wrote: key names (SHARED_KEY_PATTERN), at most 100 of them. */
export function reportedKeys(keys: unknown): string[] {
  return Array.isArray(keys)
    ? keys
        .filter((k): k is string => typeof k === 'string' && SHARED_KEY_PATTERN.test(k))
        .slice(0, 100)
    : [];
}

/**
 * The delivery an agent says did the work, when it is an id: only its task-shared writes are
 * shown (see `sharedVisibleTo`). A record of an earlier attempt of the same step keeps none.
 */
export function reportedDelivery(delivery: unknown): { delivery?: string } {
  return typeof delivery === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(delivery) ? { delivery } : {};
}

function latest(task: TaskSession, agentType: string): AgentExecutionRecord | undefined {
  return task.executions.filter((e) => e.agentType === agentType).at(-1);
}

/** Replaces the record of the same agentSessionId, or appends it. */
function put(task: TaskSession, record: AgentExecutionRecord): void {
  const i = task.executions.findIndex((e) => e.agentSessionId === record.agentSessionId);
  task.executions =
    i < 0 ? [...task.executions, record] : task.executions.map((e, j) => (j === i ? record : e));
}
