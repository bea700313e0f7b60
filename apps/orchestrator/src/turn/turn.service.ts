import { Inject, Injectable, Logger } from '@nestjs/common';
import { createHash } from 'crypto';
import { ClsService } from 'nestjs-cls';
import { detectLanguage, LOOM_ENV, LoomEnv, Planner, withCost } from '@loom/agent-kit';
import { redactPii } from '@loom/security';
import {
  ConversationLock,
  ConversationMessage,
  ConversationMeta,
  ConversationRepository,
  LockHandle,
  LoomError,
  LoomErrorCode,
  newId,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { LoomClsStore } from '@loom/observability';
import { messageView, TurnView } from '../conversations/views';
import { MetricsService, TurnMeasure } from '../metrics/metrics.service';
import { AgentCatalog } from './agent-catalog';
import { conversationWentOn, wentOnSince } from './conversation-went-on';
import { HistoryMaintenance } from './history-maintenance';
import { failure, TaskCompletion } from './task-completion';
import { recordFirstWave, TaskExecutor } from './task-executor';
import { OrphanedUserMessage } from './orphaned-user-message';
import { StaleLockHolder } from './stale-lock-holder';
import { TaskResumer } from './task-resumer';
import { retryable, TaskRetry } from './task-retry';
import { TaskLeases } from './task-run';

export const MAX_CONTENT = 32_000;

/**
 * A UTF-16 surrogate without its pair: valid JSON (`\ud800`), but no text. It has no UTF-8 form,
 * and MySQL's JSON functions refuse the task row that holds it, which failed every agent.
 */
const LONE_SURROGATE = /\p{Cs}/u;

type Plan = Awaited<ReturnType<Planner['plan']>>;

/** An Idempotency-Key and the message it was sent with, both hashed (keys can be secrets). */
interface IdempotencyKey {
  hash: string;
  requestHash: string;
}

/** A key's stored entry names the message it was sent with: another message is 409. */
function assertSameMessage(entry: { requestHash?: string }, key: IdempotencyKey): void {
  if (entry.requestHash && entry.requestHash !== key.requestHash)
    throw new LoomError(
      LoomErrorCode.CONFLICT,
      'this Idempotency-Key was already used for a different message',
    );
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 40);

/** The header's key and the message it came with, hashed as the key's entry stores them. */
const keyOf = (idempotencyKey: string, content: string): IdempotencyKey => ({
  hash: sha256(idempotencyKey),
  requestHash: sha256(content),
});

/**
 * One user turn (DESIGN.md §6) under the conversation lock. Writes are ordered so that a crash
 * between any two is harmless or recoverable: the run-index entry first (recovery can find the
 * task), then the Idempotency-Key (naming the task and its user message's seq), the user message,
 * the task (RUNNING, leased) beside the conversation's active tasks; then the agents, each
 * checkpointed; then TaskCompletion. Nothing is acknowledged before all of it is committed.
 */
@Injectable()
export class TurnService {
  private readonly log = new Logger('TurnService');

  constructor(
    private readonly planner: Planner,
    private readonly catalog: AgentCatalog,
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly system: SystemRepository,
    private readonly lock: ConversationLock,
    private readonly leases: TaskLeases,
    private readonly executor: TaskExecutor,
    private readonly completion: TaskCompletion,
    private readonly resumer: TaskResumer,
    private readonly retrier: TaskRetry,
    private readonly history: HistoryMaintenance,
    private readonly staleHolder: StaleLockHolder,
    private readonly orphans: OrphanedUserMessage,
    private readonly cls: ClsService<LoomClsStore>,
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
    private readonly metrics: MetricsService,
  ) {}

  /**
   * Plays one turn: its TurnView, or the error it answers with. Counted in loom_turns_total by
   * how it ended (a stored turn answered again as `replayed`), timed when it completed.
   */
  async turn(
    owner: Owner,
    conversationId: string,
    content: string,
    idempotencyKey?: string,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<TurnView> {
    const measure = this.metrics.turn();
    try {
      const view = await this.play(
        owner,
        conversationId,
        content,
        measure,
        idempotencyKey,
        onDelta,
      );
      measure.completed();
      return view;
    } catch (err) {
      measure.failed(err);
      throw err;
    }
  }

  private async play(
    owner: Owner,
    conversationId: string,
    content: string,
    measure: TurnMeasure,
    idempotencyKey?: string,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<TurnView> {
    this.assertContent(content);
    await this.conversations.get(owner, conversationId);
    this.cls.set('conversationId', conversationId);
    return this.underLock(owner, conversationId, async (lock) => {
      const key = idempotencyKey ? keyOf(idempotencyKey, content) : null;
      const { previous, stored, orphan, meta } = await this.settleEarlier(
        owner,
        conversationId,
        key,
        lock,
        onDelta,
      );
      if (stored) measure.replayed();
      if (previous) return await this.completion.view(owner, previous);
      return await this.start(owner, meta, content, key, lock, onDelta, orphan);
    });
  }

  /**
   * Runs `work` holding the conversation lock. A lock held by a worker that stopped (its process
   * is gone, whatever it was doing, or its task's lease ran out) is taken over as recovery
   * would, with a new fence, rather than waited out until its TTL; `work` then finishes that
   * worker's tasks first (settleEarlier).
   */
  private async underLock<T>(
    owner: Owner,
    conversationId: string,
    work: (lock: LockHandle) => Promise<T>,
  ): Promise<T> {
    let stale: string | null = null;
    const staleHolder = async (token: string) =>
      (stale = await this.staleHolder.taskOf(owner, conversationId, token)) !== null;
    const lock = await this.lock.acquire({ tenantId: owner.tenantId }, conversationId, undefined, {
      staleHolder,
    });
    if (lock.holderGone)
      this.log.log('took over the lock of a stopped process: its liveness key had lapsed');
    else if (lock.takenOverFrom) this.log.log(`took over the lock of ${stale}: its worker stopped`);
    try {
      return await work(lock);
    } finally {
      await lock.release();
    }
  }

  /**
   * At most MAX_CONTENT characters (code points: an emoji is one), else 413; then Unicode text,
   * else 400 (a lone surrogate).
   */
  assertContent(content: string): void {
    if (typeof content !== 'string' || content.length > MAX_CONTENT) {
      let chars = 0;
      // Code points: an emoji is one character, and so is a lone surrogate.
      if (typeof content === 'string') for (const _ of content) if (++chars > MAX_CONTENT) break;
      if (typeof content !== 'string' || chars > MAX_CONTENT)
        throw new LoomError(
          LoomErrorCode.PAYLOAD_TOO_LARGE,
          `content must be at most ${MAX_CONTENT} characters`,
        );
    }
    if (LONE_SURROGATE.test(content))
      throw new LoomError(
        LoomErrorCode.VALIDATION_FAILED,
        'content must be Unicode text: it holds a lone surrogate',
      );
  }

  /**
   * What a streamed turn checks before its 200, in the turn's own order, so that it answers with
   * its own status: the content, the conversation, an `idempotencyKey` already used in it for
   * another message (409; a key's entry, and the message hash in it, never change once
   * written), and a key whose turn failed for good (502 AGENT_FAILED, 409: a task FAILED with
   * such an error is never run again, so that stays the key's answer) or failed with a 503 and
   * the conversation went on since (409, as its retry under the lock answers). A refusal is
   * counted in loom_turns_total as turn() counts it.
   */
  async assertStreamable(
    owner: Owner,
    conversationId: string,
    content: string,
    idempotencyKey?: string,
  ): Promise<void> {
    const measure = this.metrics.turn();
    try {
      this.assertContent(content);
      await this.conversations.get(owner, conversationId);
      if (!idempotencyKey) return;
      const key = keyOf(idempotencyKey, content);
      const entry = await this.tasks.idempotentTask(owner, conversationId, key.hash);
      if (!entry) return;
      assertSameMessage(entry, key);
      const task = await this.tasks.get(owner, conversationId, entry.taskId, true);
      if (task?.status !== TaskStatus.FAILED) return;
      if (!retryable(task)) {
        measure.replayed();
        throw failure(task.error);
      }
      // A 503 run again by its retry, unless a later message is in the conversation (a message
      // is never taken back: read from the cache, one it lacks is seen again under the lock).
      if (await wentOnSince(this.conversations, owner, task)) throw conversationWentOn();
    } catch (err) {
      measure.failed(err);
      throw err;
    }
  }

  /**
   * DELETE /v1/conversations/:id, under the conversation lock: a running turn finishes first
   * (or the delete answers 409 after the lock wait), so no turn writes into, or recreates rows
   * of, a conversation being removed. Its interrupted tasks leave the run index with it.
   */
  async remove(owner: Owner, conversationId: string): Promise<void> {
    await this.conversations.getForRemoval(owner, conversationId);
    await this.underLock(owner, conversationId, async () => {
      // Read from MySQL under the lock: the owner check and the tasks still to unlist (all of
      // them when its record is damaged: which were active is unknown then).
      const meta = await this.conversations.getForRemoval(owner, conversationId, true);
      const taskIds = await this.conversations.purge(owner.tenantId, conversationId);
      for (const taskId of meta?.activeTaskIds ?? taskIds) await this.system.removeRun(taskId);
    });
  }

  /**
   * Interrupted turns of this conversation are finished before a new one starts (turns stay in
   * order). Returns the task an Idempotency-Key retry refers to, if its first attempt got that
   * far (finished now if it was interrupted, run again if it failed with a 503), else the user
   * message it stored before stopping (OrphanedUserMessage), and the conversation as it stands now.
   * `stored`: the task had ended before this request, and is answered as it ended.
   */
  private async settleEarlier(
    owner: Owner,
    conversationId: string,
    key: IdempotencyKey | null,
    lock: LockHandle,
    onDelta?: (agentType: string, text: string) => void,
  ): Promise<{
    previous: TaskSession | null;
    stored?: boolean;
    orphan: ConversationMessage | null;
    meta: ConversationMeta;
  }> {
    let meta = await this.conversations.get(owner, conversationId, true);
    const interrupted = meta.activeTaskIds;
    // A key's entry never changes once written: read before the interrupted turns are finished,
    // so that a streaming retry of one of them gets its answer as it is written.
    const entry = key && (await this.tasks.idempotentTask(owner, conversationId, key.hash));
    const ours =
      entry && (!entry.requestHash || entry.requestHash === key?.requestHash) ? entry.taskId : null;
    if (meta.activeTaskIds.length > 0) {
      for (const taskId of meta.activeTaskIds)
        await this.resumer.resume(
          owner,
          conversationId,
          taskId,
          lock,
          taskId === ours ? onDelta : undefined,
        );
      meta = await this.conversations.get(owner, conversationId, true);
    }
    const none = { previous: null, orphan: null, meta };
    if (!key || !entry) return none;
    assertSameMessage(entry, key);
    const { taskId } = entry;
    const task = await this.tasks.get(owner, conversationId, taskId, true);
    if (!task) return { ...none, orphan: await this.orphans.find(owner, conversationId, entry) };
    if (retryable(task))
      return { ...none, previous: await this.retrier.retry(owner, task, lock, onDelta) };
    // Ended before this request, not by the resume above (which finished the turn now).
    const stored = !interrupted.includes(taskId);
    if (task.status !== TaskStatus.RUNNING) return { ...none, previous: task, stored };
    const resumed = await this.resumer.resume(owner, conversationId, taskId, lock, onDelta);
    return { ...none, previous: resumed };
  }

  private async start(
    owner: Owner,
    meta: ConversationMeta,
    content: string,
    key: IdempotencyKey | null,
    lock: LockHandle,
    onDelta?: (agentType: string, text: string) => void,
    orphan: ConversationMessage | null = null,
  ): Promise<TurnView> {
    const { conversationId } = meta;
    // LOOM_REDACT_STORED: redacted before it is stored or shown to a model, and only here: the
    // size limit and the Idempotency-Key's message hash are the client's own text. An orphan
    // (an earlier attempt's message, adopted) is the text as stored.
    if (orphan) content = orphan.content;
    else if (this.env.LOOM_REDACT_STORED) content = redactPii(content);
    const language = detectLanguage(content);
    // The history before this turn's message, as the earlier attempt planned with.
    const [recent, catalog] = await Promise.all([
      this.conversations.messages(owner, conversationId, { last: orphan ? 11 : 10 }),
      this.catalog.agents(),
    ]);
    const history = recent.filter((m) => m.seq !== orphan?.seq);
    const plan = await this.plan(content, history, meta.currentIntent, catalog);
    const taskId = orphan?.taskId ?? newId('t');
    this.cls.set('taskId', taskId);
    await this.system.saveRun(this.leases.runEntry(owner, conversationId, taskId, lock));
    const userMessage =
      orphan ?? (await this.appendUserMessage(owner, conversationId, content, taskId, key, lock));
    if (this.env.LOOM_TEST_KILL_AFTER_USER_MESSAGE && !orphan) process.kill(process.pid, 'SIGKILL');
    const task = this.newTask(owner, taskId, conversationId, content, plan, userMessage.seq);
    task.idempotencyKey = key?.hash ?? null;
    recordFirstWave(task);
    meta.activeTaskIds = [...meta.activeTaskIds, taskId];
    // The topic in force from now on, whether or not this turn is answered: a follow-up to a
    // failed turn stays with it (completion sets the same).
    meta.currentIntent = plan.intent;
    // Side by side: the resumer joins a task missing from activeTaskIds (or fails it, once later
    // turns went ahead of it) and drops an id whose task was never written, so any crash between
    // the two is recoverable.
    await Promise.all([
      this.tasks.create(owner, task, lock.fence),
      this.conversations.save(owner, meta, lock.fence),
    ]);
    this.log.log(
      `plan ${plan.intent}: ${plan.steps.map((s) => s.agentType).join(' → ') || '(none)'}`,
    );

    const run = this.leases.open(owner, task, lock).start();
    run.onDelta = onDelta;
    let view: TurnView;
    try {
      const result = await run.guard(this.executor.run(run, language, { firstWaveSaved: true }));
      if (!result.ok) {
        await this.completion.fail(run, result.error);
        // Its user message stays: what it pushes out of the next turn's window is folded too.
        await this.maintainHistory(owner, conversationId, lock.fence, userMessage.seq);
        throw failure(result.error);
      }
      view = await this.completion.finish(run, result.outcome, null, { user: userMessage, meta });
    } finally {
      run.stop();
    }
    await this.maintainHistory(owner, conversationId, lock.fence, view.reply.seq);
    return { ...view, userMessage: messageView(userMessage) };
  }

  /** The summary after a turn, answered or failed: its failure fails no turn. */
  private maintainHistory(owner: Owner, conversationId: string, fence: number, count: number) {
    return this.history
      .afterTurn(owner, conversationId, fence, count)
      .catch((err) => this.log.warn(`history maintenance failed: ${err.message}`));
  }

  /**
   * With an Idempotency-Key, its entry first, naming the task and the seq the message is then
   * appended at: a retry after a failure before the task is written finds the message there
   * (OrphanedUserMessage) rather than appending it again.
   */
  private async appendUserMessage(
    owner: Owner,
    conversationId: string,
    content: string,
    taskId: string,
    key: IdempotencyKey | null,
    lock: LockHandle,
  ): Promise<ConversationMessage> {
    let userSeq: number | undefined;
    if (key) {
      userSeq = (await this.conversations.messageCount(owner, conversationId, true)) + 1;
      const entry = { taskId, requestHash: key.requestHash, userSeq };
      await this.tasks.rememberIdempotent(owner, conversationId, key.hash, entry, lock.fence);
    }
    const message = {
      role: 'user' as const,
      content,
      agentType: null,
      taskId,
      createdAt: this.conversations.now(),
      tokens: 0,
    };
    return this.conversations.appendMessage(owner, conversationId, message, lock.fence, userSeq);
  }

  /**
   * Planned from every known agent type; an optional step never waits for an agent that is not
   * running, a required one is queued for it (and fails with TIMEOUT after AGENT_TIMEOUT_MS),
   * but for research-only plans, answered by the research agents that run when any does.
   */
  private async plan(
    content: string,
    history: ConversationMessage[],
    currentIntent: string | null,
    { agents, live }: Awaited<ReturnType<AgentCatalog['agents']>>,
  ): Promise<Plan> {
    const plan = await this.planner.plan({ message: content, history, currentIntent, agents });
    // A plan without a specialist requires its research steps, any one of which is a reply: it
    // waits for a stopped research agent only when none of them runs.
    const research = new Set(agents.filter((a) => a.role === 'research').map((a) => a.agentType));
    const researchOnly = plan.steps.every((s) => research.has(s.agentType));
    const waits = !(researchOnly && plan.steps.some((s) => live.has(s.agentType)));
    const steps = plan.steps.filter((s) => live.has(s.agentType) || (s.required && waits));
    const kept = new Set(steps.map((s) => s.agentType));
    return {
      ...plan,
      steps: steps.map((s) => ({ ...s, dependsOn: s.dependsOn.filter((d) => kept.has(d)) })),
    };
  }

  private newTask(
    owner: Owner,
    taskId: string,
    conversationId: string,
    content: string,
    plan: Plan,
    userSeq: number,
  ): TaskSession {
    return {
      taskId,
      conversationId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: plan.taskType,
      userIntent: content,
      intent: plan.intent,
      plan: plan.steps,
      status: TaskStatus.RUNNING,
      executions: [],
      userSeq,
      replySeq: null,
      idempotencyKey: null,
      lease: {
        owner: this.leases.instanceId,
        // Capped once this process is shutting down, like every checkpoint.
        expiresAt: new Date(this.leases.leaseEnd()).toISOString(),
      },
      createdAt: new Date(this.leases.now()).toISOString(), // the scan's clock (SharedClock)
      completedAt: null,
      error: null,
      planUsage: plan.usage ? withCost(plan.usage) : null,
    };
  }
}
