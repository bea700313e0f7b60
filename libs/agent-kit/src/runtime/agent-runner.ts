import { Inject, Injectable, Logger } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { ClsService } from 'nestjs-cls';
import {
  AGENT_HISTORY_BUDGET,
  AgentSession,
  ConversationRepository,
  ExecutionClaim,
  ExecutionClaims,
  ExecutionStatus,
  LoomError,
  LoomErrorCode,
  privateStateProblem,
  SESSION_INFRA,
  SessionContext,
  SessionInfra,
  SharedClock,
  SharedContextAcl,
  TaskRepository,
  TaskSession,
  TaskStatus,
  Usage,
  addUsage,
} from '@loom/session';
import { AssignmentSigner, redactPii } from '@loom/security';
import { LoomClsStore, pickMdc } from '@loom/observability';
import { LoomEnv } from '../config/loom-env';
import { LOOM_ENV } from '../config/session-options.factory';
import { AgentRegistration } from '../contracts/agent-descriptor';
import {
  boundedMessage,
  ExecuteAgentRequest,
  ExecuteAgentResult,
  MAX_ANSWER_CHARS,
  MAX_ERROR_MESSAGE_CHARS,
} from '../contracts/agent-messages';
import { LLM_CLIENT, LlmClient, LlmError, LlmResult, LlmUsage, withCost } from '../llm/llm.types';
import { DeltaChannel } from '../streaming/delta-channel';
import { DeltaPublisher } from '../streaming/delta-publisher';
import { AGENT_DESCRIPTOR, AGENT_HANDLER, AgentHandler, agentService } from './agent-handler';
import { cancellableLlm, ExecutionCancellation, unlessCancelled } from './execution-cancellation';

export const INSTANCE_ID = Symbol('INSTANCE_ID');

/**
 * Runs one execution for the agent app: verifies the signed assignment, restores the
 * correlation fields into CLS, claims the execution (one delivery at a time), returns the
 * stored result for a redelivery of finished work (idempotent by agentSessionId), else builds
 * the SessionContext and calls the handler with the execution's AbortSignal. A cancelled
 * execution (see ExecutionCancellation) fails with its typed error, recorded and answered.
 */
@Injectable()
export class AgentRunner {
  private readonly log = new Logger('AgentRunner');
  private readonly claims: ExecutionClaims;
  private readonly deltas: DeltaChannel;

  constructor(
    @Inject(AGENT_DESCRIPTOR) private readonly descriptor: AgentRegistration,
    @Inject(AGENT_HANDLER) private readonly handler: AgentHandler,
    @Inject(LLM_CLIENT) private readonly llm: LlmClient,
    @Inject(INSTANCE_ID) private readonly instanceId: string,
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly acl: SharedContextAcl,
    private readonly signer: AssignmentSigner,
    private readonly cls: ClsService<LoomClsStore>,
    @Inject(SESSION_INFRA) infra: SessionInfra,
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly clock: SharedClock,
  ) {
    // The claim's deadline is the assignment's expiry, written on the orchestrator's SharedClock.
    this.claims = new ExecutionClaims(infra.redis, infra.keys, undefined, clock);
    this.deltas = new DeltaChannel(infra.redis, infra.keys.prefix);
  }

  /**
   * `transport`: the transport's signal for this request, when it has one (it aborts when the
   * caller's deadline passes or the agent stops past its drain).
   */
  execute(req: ExecuteAgentRequest, transport?: AbortSignal): Promise<ExecuteAgentResult> {
    return this.cls.run(async () => {
      // Only a well-formed one (as the interceptor takes it): `meta` is not signed, and every
      // log line of the execution carries it.
      const { correlationId } = pickMdc(req.meta);
      if (correlationId) this.cls.set('correlationId', correlationId);
      this.cls.set('service', agentService(this.descriptor.agentType));
      this.cls.set('agentType', this.descriptor.agentType);
      this.cls.set('agentId', this.instanceId);
      const cancellation = new ExecutionCancellation(this.env.AGENT_MAX_EXECUTION_MS, transport);
      const spent = new SpentOnModel();
      try {
        const claims = this.signer.verify(req.assignment, this.descriptor.agentType);
        this.cls.set('tenantId', claims.tenantId);
        this.cls.set('conversationId', claims.conversationId);
        this.cls.set('taskId', claims.taskId);
        return await this.run(req, claims, cancellation.signal, spent);
      } catch (err) {
        const rpc = toRpc(err, this.log, spent.total);
        throw this.env.LOOM_REDACT_STORED ? redactedRpc(rpc) : rpc;
      } finally {
        cancellation.end();
      }
    });
  }

  private async run(
    req: ExecuteAgentRequest,
    claims: ReturnType<AssignmentSigner['verify']>,
    signal: AbortSignal,
    spent: SpentOnModel,
  ): Promise<ExecuteAgentResult> {
    const owner = { tenantId: claims.tenantId, userId: claims.userId };
    // Two deliveries of one execution never run side by side: the second waits for the first
    // (a cancelled one included, until it has wound down), then finds its result stored.
    const claim = await this.claims.acquire(
      claims.conversationId,
      claims.agentSessionId,
      claims.expiresAt,
      signal,
    );
    try {
      const { session, task } = await this.tasks.executionState(
        owner,
        claims.conversationId,
        claims.taskId,
        claims.agentSessionId,
      );
      const stored = this.storedResult(claims, session, task);
      return 'replayed' in stored
        ? stored
        : await this.work(req, claims, session, claim, stored.task, signal, spent);
    } finally {
      await claim.release();
    }
  }

  /**
   * Finished work is never done again and nothing is written: the agent session's result, else
   * (its task closed and dropped the session) the task's execution record; an execution of a
   * closed task that never finished, or one its task recorded as failed, is refused. Else the
   * task (read with the session), for the context.
   */
  private storedResult(
    claims: ReturnType<AssignmentSigner['verify']>,
    session: AgentSession | null,
    task: TaskSession | null,
  ): ExecuteAgentResult | { task: TaskSession } {
    const { agentSessionId } = claims;
    if (session?.status === ExecutionStatus.COMPLETED && session.output) {
      this.log.log('redelivery of finished work: returning the stored result');
      return { ...(session.output as ExecuteAgentResult), replayed: true };
    }
    if (!task) throw new LoomError(LoomErrorCode.NOT_FOUND, 'task not found');
    const record = task.executions.find(
      (e) => e.agentSessionId === agentSessionId && e.status === ExecutionStatus.COMPLETED,
    );
    if (record) {
      this.log.log('redelivery of work its task already recorded: returning the record');
      return {
        agentSessionId,
        agentType: record.agentType,
        agentId: this.instanceId,
        output: record.output ?? '',
        sharedKeysWritten: record.sharedKeysWritten ?? [],
        context: record.context,
        usage: record.usage,
        replayed: true,
        ...(record.delivery ? { delivery: record.delivery } : {}),
      };
    }
    if (task.status !== TaskStatus.RUNNING)
      throw new LoomError(LoomErrorCode.CONFLICT, `the task is ${task.status.toLowerCase()}`);
    // A late delivery of an execution the task gave up on: a retry of the task (Idempotency-Key)
    // runs the step again under a new agentSessionId, and this one must not write beside it.
    if (
      task.executions.some(
        (e) => e.agentSessionId === agentSessionId && e.status === ExecutionStatus.FAILED,
      )
    )
      throw new LoomError(LoomErrorCode.CONFLICT, 'the task recorded this execution as failed');
    return { task };
  }

  private async work(
    req: ExecuteAgentRequest,
    claims: ReturnType<AssignmentSigner['verify']>,
    existing: AgentSession | null,
    claim: ExecutionClaim,
    task: TaskSession,
    signal: AbortSignal,
    spent: SpentOnModel,
  ): Promise<ExecuteAgentResult> {
    const owner = { tenantId: claims.tenantId, userId: claims.userId };
    // Written once, when the execution ends: a crash before that leaves nothing to clean up, and
    // the claim (not a RUNNING row) is what keeps a second delivery from working alongside.
    const session = existing ?? this.newSession(claims);
    session.attempts += 1;
    session.status = ExecutionStatus.RUNNING;
    const assignment = { owner, ...claims, agentId: this.instanceId };
    const ctx = await SessionContext.build(
      {
        conversations: this.conversations,
        tasks: this.tasks,
        acl: this.acl,
        beforeWrite: () => claim.confirm(),
        onOverwrite: (e) => this.log.warn({ msg: 'shared key overwritten', ...e }),
      },
      assignment,
      AGENT_HISTORY_BUDGET,
      session,
      task,
    );
    this.log.log({
      msg: `executing with ${ctx.history.length} history messages`,
      agentSessionId: claims.agentSessionId,
    });
    const language = req.language ?? 'en';
    try {
      // A cancelled or settled execution streams nothing more, whatever its handler still does.
      const publisher = req.stream
        ? new DeltaPublisher(
            this.deltas,
            claims.conversationId,
            claims.agentSessionId,
            MAX_ANSWER_CHARS,
            (err) => this.log.warn(`delta not published: ${err.message}`),
          )
        : null;
      const onDelta = publisher
        ? (text: string) => (signal.aborted ? undefined : publisher.push(text))
        : undefined;
      const llm = metered(cancellableLlm(this.llm, signal), spent);
      const out = checkedAnswer(
        await unlessCancelled(
          this.handler.handle(ctx, { llm, language, onDelta, signal }),
          signal,
        ).finally(() => publisher?.close()),
      );
      const result: ExecuteAgentResult = {
        agentSessionId: claims.agentSessionId,
        agentType: this.descriptor.agentType,
        agentId: this.instanceId,
        output: out.answer,
        // What it wrote, and what the handler says it wrote some other way.
        sharedKeysWritten: [
          ...new Set([...ctx.sharedKeysWritten, ...(out.sharedKeysWritten ?? [])]),
        ].sort(),
        context: ctx.report(),
        usage: out.usage,
        replayed: false,
        delivery: ctx.delivery,
      };
      // remember() bounds the memory as it goes; a handler that assigned ctx.agent's fields
      // directly is bounded here, before anything of it is stored.
      const over = privateStateProblem(ctx.agent);
      if (over)
        throw new LoomError(
          LoomErrorCode.AGENT_FAILED,
          `the handler left ${over.message}`,
          out.usage ? { usage: out.usage } : undefined,
        );
      await claim.confirm();
      await this.tasks.saveAgentSession(owner, {
        ...ctx.agent,
        messages: [
          ...(ctx.agent.messages ?? []),
          { role: 'assistant', content: out.answer, at: this.isoNow() },
        ],
        status: ExecutionStatus.COMPLETED,
        output: result,
        completedAt: this.isoNow(),
        ...assigned(claims),
      });
      // One line per execution whose work was stored: the chaos audit counts them per id.
      this.log.log({ msg: 'executed', agentSessionId: claims.agentSessionId });
      return result;
    } catch (err) {
      // A delivery that lost its claim (whatever the handler made of that) leaves the agent
      // session and the answer to the one that took it over.
      if (LoomError.is(err, LoomErrorCode.SUPERSEDED)) throw err;
      if (signal.aborted) {
        const reason = signal.reason as LoomError;
        this.log.warn({ msg: 'execution cancelled', code: reason.code, reason: reason.message });
      }
      const held = await claim.confirm().then(
        () => true,
        (lost: unknown) => {
          if (LoomError.is(lost, LoomErrorCode.SUPERSEDED)) throw lost;
          return false; // Redis out of reach: the failure is answered, not recorded
        },
      );
      if (held)
        await this.tasks
          .saveAgentSession(owner, {
            ...withoutOversized(ctx.agent),
            status: ExecutionStatus.FAILED,
            lastError: this.storable(boundedMessage(describe(err))),
            ...assigned(claims),
          })
          .catch(() => undefined);
      throw err;
    }
  }

  /** An error's text as it may be stored: redacted with LOOM_REDACT_STORED (it may quote the user). */
  private storable(text: string): string {
    return this.env.LOOM_REDACT_STORED ? redactPii(text) : text;
  }

  private newSession(c: ReturnType<AssignmentSigner['verify']>): AgentSession {
    return {
      agentSessionId: c.agentSessionId,
      conversationId: c.conversationId,
      taskId: c.taskId,
      agentId: this.instanceId,
      agentType: c.agentType,
      status: ExecutionStatus.PENDING,
      attempts: 0,
      lastError: null,
      localMemory: {},
      toolCalls: [],
      messages: [],
      output: null,
      startedAt: this.isoNow(),
      completedAt: null,
    };
  }

  /** Now on the deployment's clock (SharedClock, no round trip), as the task's times are. */
  private isoNow(): string {
    return new Date(this.clock.now()).toISOString();
  }
}

/**
 * Where an agent session is stored, from the verified assignment: the handler's `ctx.agent` is
 * its own to change, so ids it holds are never trusted to say which session (or conversation,
 * or task) a save goes to.
 */
function assigned(c: ReturnType<AssignmentSigner['verify']>) {
  const { agentSessionId, conversationId, taskId, agentType } = c;
  return { agentSessionId, conversationId, taskId, agentType };
}

/**
 * The agent session as a failed execution stores it: a part of its private state over its limit
 * (or not storable at all) is stored empty, not as the handler left it.
 */
function withoutOversized(agent: AgentSession): AgentSession {
  const over = privateStateProblem(agent);
  if (!over) return agent;
  const empty = { localMemory: {}, messages: [], toolCalls: [] };
  return { ...agent, ...Object.fromEntries(over.parts.map((p) => [p, empty[p]])) };
}

/**
 * Anything thrown in an agent leaves it as RpcException({ code, message }), never a stack; its
 * message cut to MAX_ERROR_MESSAGE_CHARS (a handler's own RpcException's too), before it is
 * answered or logged. Its body is one JSON can write: a reply that cannot be written is never
 * sent, and its caller would wait for it until its deadline.
 */
export function toRpc(err: unknown, log: Logger, spent?: Usage | null): RpcException {
  return writable(rpcFor(err, log, spent ?? undefined), log);
}

/**
 * `spent`: what the execution's model calls through `tools.llm` cost, reported with an error
 * that says no cost of its own (a handler that threw after its model answered), so the
 * orchestrator counts it.
 */
function rpcFor(err: unknown, log: Logger, spent?: Usage): RpcException {
  if (err instanceof RpcException) return withSpent(boundedRpc(err), spent);
  // `limit: 'total'`: a cancelled execution's time limit, which the orchestrator names as such.
  if (LoomError.is(err))
    return new RpcException({
      code: err.code,
      message: boundedMessage(err.message),
      ...(err.details?.limit ? { limit: err.details.limit } : {}),
      // What its model calls cost (checked by the orchestrator before it is counted).
      ...(err.details?.usage ? { usage: err.details.usage } : spent ? { usage: spent } : {}),
    });
  if (err instanceof LlmError) {
    log.warn(err.message);
    const usage = err.usage ? withCost(err.usage) : spent;
    // A busy provider is the platform's temporary state, not the agent's failure: 503, retry.
    // `modelSaid`: the message is the model client's public one, fit for the user's eyes.
    return new RpcException({
      code: err.busy ? LoomErrorCode.UNAVAILABLE : LoomErrorCode.AGENT_FAILED,
      message: err.publicMessage,
      usage,
      modelSaid: true,
      // The provider's Retry-After, for the HTTP client: it should not retry at once.
      ...(err.busy && err.retryAfterS ? { retryAfterS: err.retryAfterS } : {}),
    });
  }
  // A handler may throw anything: a string, undefined, an object without a prototype, an Error
  // whose message is megabytes. The log line says what it was, bounded.
  log.error(
    err instanceof Error
      ? {
          msg: boundedMessage(err.message),
          name: err.name,
          stack: typeof err.stack === 'string' ? boundedMessage(err.stack, 4_000) : undefined,
        }
      : `the handler threw ${boundedMessage(describe(err))}`,
  );
  return new RpcException({
    code: LoomErrorCode.AGENT_FAILED,
    message: 'the agent failed',
    ...(spent ? { usage: spent } : {}),
  });
}

/** A handler's own RpcException, with `spent` when its body is an object that says no usage. */
function withSpent(err: RpcException, spent?: Usage): RpcException {
  const body = err.getError();
  if (!spent || typeof body !== 'object' || body === null || 'usage' in body) return err;
  return new RpcException({ ...body, usage: spent });
}

/** What an execution's model calls cost, as far as their clients reported it. */
class SpentOnModel {
  total: Usage | null = null;

  add(usage: LlmUsage | undefined): void {
    if (usage)
      this.total = addUsage(
        this.total ?? withCost({ promptTokens: 0, completionTokens: 0 }),
        withCost(usage),
      );
  }
}

/**
 * `llm` whose every call's usage (an answer's, or a failed call's that the provider answered)
 * is added to `spent`.
 */
function metered(llm: LlmClient, spent: SpentOnModel): LlmClient {
  const answered = (res: LlmResult): LlmResult => {
    spent.add(res.usage);
    return res;
  };
  const failed = (err: unknown): never => {
    if (err instanceof LlmError) spent.add(err.usage);
    throw err;
  };
  return {
    provider: llm.provider,
    complete: (req) => llm.complete(req).then(answered, failed),
    stream: (req) => {
      const stream = llm.stream(req);
      const result = stream.result.then(answered, failed);
      result.catch(() => undefined); // a handler that reads only the deltas: no unhandled rejection
      return { deltas: stream.deltas, result };
    },
  };
}

/**
 * `err` as it is when JSON can write its body; else (a body that contains itself, a BigInt, a
 * `toJSON` that throws) its code and message alone, when they are text.
 */
function writable(err: RpcException, log: Logger): RpcException {
  const body = err.getError();
  try {
    JSON.stringify(body);
    return err;
  } catch {
    const { code, message } = (body ?? {}) as { code?: unknown; message?: unknown };
    log.error("the agent's error cannot be written as JSON: answering its code and message only");
    return new RpcException({
      code: typeof code === 'string' && code ? code : LoomErrorCode.AGENT_FAILED,
      message: typeof message === 'string' ? boundedMessage(message) : 'the agent failed',
    });
  }
}

/**
 * `err` with its message (a string body, or a body's `message`) PII-redacted (LOOM_REDACT_STORED):
 * the orchestrator stores what an agent answers in the task, and shows it to the user.
 */
function redactedRpc(err: RpcException): RpcException {
  const body = err.getError();
  if (typeof body === 'string') return new RpcException(redactPii(body));
  const { message } = (body ?? {}) as { message?: unknown };
  if (typeof message !== 'string') return err;
  return new RpcException({ ...(body as object), message: redactPii(message) });
}

/** `err` with its message (a string body, or a body's `message`) cut, when it is too long. */
function boundedRpc(err: RpcException): RpcException {
  const body = err.getError();
  if (typeof body === 'string') {
    return body.length > MAX_ERROR_MESSAGE_CHARS ? new RpcException(boundedMessage(body)) : err;
  }
  const { message } = (body ?? {}) as { message?: unknown };
  if (typeof message !== 'string' || message.length <= MAX_ERROR_MESSAGE_CHARS) return err;
  return new RpcException({ ...(body as object), message: boundedMessage(message) });
}

/** What a handler returned, when it is an answer: text, not blank, at most MAX_ANSWER_CHARS. */
function checkedAnswer(out: unknown): Awaited<ReturnType<AgentHandler['handle']>> {
  // What the refused answer cost (a model's answer over the limit, say) is counted all the same.
  const usage = (out as { usage?: unknown } | null)?.usage;
  const refuse = (what: string) =>
    new LoomError(
      LoomErrorCode.AGENT_FAILED,
      `the handler returned ${what}`,
      usage ? { usage } : undefined,
    );
  if (typeof out !== 'object' || out === null) throw refuse(`${kind(out)}, not { answer, usage }`);
  const { answer } = out as { answer?: unknown };
  if (typeof answer !== 'string') throw refuse(`an answer that is not text (${kind(answer)})`);
  if (answer.trim() === '') throw refuse('an empty answer');
  if (answer.length > MAX_ANSWER_CHARS)
    throw refuse(`an answer over ${MAX_ANSWER_CHARS} characters (${answer.length})`);
  return out as Awaited<ReturnType<AgentHandler['handle']>>;
}

function kind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value;
}

/** Any thrown value as text, never throwing itself (`String(Object.create(null))` does). */
function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  try {
    return String(err);
  } catch {
    return '(a value without a text form)';
  }
}
