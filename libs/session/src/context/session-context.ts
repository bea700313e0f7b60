import { Logger } from '@nestjs/common';
import { ConversationRepository } from '../conversation/conversation.repository';
import { Owner } from '../conversation/owner';
import { foldShared, SharedReader, TaskRepository } from '../conversation/task.repository';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { newId } from '../ids';
import { AgentSession } from '../model/agent.model';
import {
  ConversationMeta,
  ConversationMessage,
  ConversationSummary,
  UserProfile,
} from '../model/conversation.model';
import { ContextReport, SharedEntry, TaskSession } from '../model/task.model';
import {
  jsonChars,
  MAX_MEMORY_JSON_CHARS,
  MAX_SHARED_KEY_CHARS,
  MAX_SHARED_KEYS,
  MAX_SHARED_VALUE_JSON_CHARS,
  SHARED_KEY_PATTERN,
  tooLarge,
} from './context-limits';
import { recentTurns, withinTokenBudget } from './history';
import { SharedContextAcl } from './shared-acl';

/** What one agent execution may touch: exactly one conversation, task and agent session. */
export interface Assignment {
  owner: Owner;
  conversationId: string;
  taskId: string;
  agentSessionId: string;
  agentType: string;
  agentId: string;
}

export interface ContextBudget {
  historyTokens: number;
  maxMessages: number;
}

export interface SessionContextDeps {
  conversations: ConversationRepository;
  tasks: TaskRepository;
  acl: SharedContextAcl;
  /** Awaited before every durable write; throws to keep the write out (a lost execution claim). */
  beforeWrite?: () => Promise<void>;
  onOverwrite?: (e: {
    key: string;
    writer: string;
    previousWriter: string;
    taskId: string;
  }) => void;
}

/**
 * The three layers as one agent sees them (seed 000 SessionContext): recent history within a
 * token budget plus the summary, the task goal, task-shared data with writers, the user profile
 * and the agent's own memory. Built from Redis/MySQL for every execution.
 */
export class SessionContext {
  private readonly written = new Set<string>();
  /**
   * This run of the execution's handler: its writes carry it, and only the delivery whose
   * result the task records has its writes shown to others (see `sharedVisibleTo`). Read-only
   * at runtime too (assigning it is a TypeError): the result names it, and a result naming
   * another (or no valid id) would show the writes of every delivery of the execution, a
   * failed earlier one's half-done writes included.
   */
  declare readonly delivery: string;
  /** Characters of each private-memory entry's `"key":value` (remember), once first measured. */
  private memorySizes?: Map<string, number>;
  private memoryBodyChars = 0;

  private constructor(
    private readonly deps: SessionContextDeps,
    readonly assignment: Assignment,
    readonly conversation: ConversationMeta,
    readonly task: TaskSession,
    readonly agent: AgentSession,
    readonly history: ConversationMessage[],
    readonly summary: ConversationSummary | null,
    private sharedView: Record<string, SharedEntry>,
  ) {
    Object.defineProperty(this, 'delivery', { value: newId('d'), enumerable: true });
  }

  /**
   * Loads what the assignment names, and nothing else: the task must belong to the assigned
   * conversation and list the assigned agent type in its plan, and the agent session must be the
   * assigned one (same conversation, task, id and type); anything else is ACCESS_DENIED. The
   * context's assignment and task are frozen (the task in place): the handler cannot retarget
   * its writes or change the task type the ACL is checked against.
   */
  static async build(
    deps: SessionContextDeps,
    a: Assignment,
    budget: ContextBudget,
    agent: AgentSession,
    /** The task, when the caller has just read it (from MySQL): not read again. */
    known?: TaskSession,
  ): Promise<SessionContext> {
    if (
      agent.agentSessionId !== a.agentSessionId ||
      agent.conversationId !== a.conversationId ||
      agent.taskId !== a.taskId ||
      agent.agentType !== a.agentType
    )
      throw outside('agent session');
    // Independent reads, all within the assignment's conversation and tenant: side by side. The
    // newest messages are read with the summary, not after it: the newest past the summary's
    // range are the newest of all whose seq is past it (seqs are contiguous), and nobody writes
    // either meanwhile (the turn's lock is held while its agents work).
    const [conversation, task, summary, writes, newest] = await Promise.all([
      deps.conversations.get(a.owner, a.conversationId),
      known ?? deps.tasks.get(a.owner, a.conversationId, a.taskId),
      deps.conversations.summary(a.owner, a.conversationId),
      deps.tasks.sharedWrites(a.owner, a.conversationId, a.taskId),
      deps.conversations.messages(a.owner, a.conversationId, { last: budget.maxMessages + 1 }),
    ]);
    if (!task) throw new LoomError(LoomErrorCode.NOT_FOUND, 'task not found');
    if (
      task.taskId !== a.taskId ||
      task.conversationId !== a.conversationId ||
      task.tenantId !== a.owner.tenantId ||
      task.userId !== a.owner.userId
    )
      throw outside('task');
    if (!task.plan.some((s) => s.agentType === a.agentType)) throw outside('task plan');
    const summarized = summary?.toSeq ?? 0;
    const beforeThisTurn = newest.filter((m) => m.seq > summarized && m.seq < task.userSeq);
    const history = withinTokenBudget(
      beforeThisTurn.slice(-budget.maxMessages),
      budget.historyTokens,
    );
    // What the executions that succeeded wrote: a failed attempt's writes are not shown.
    const shared = foldShared(writes, { task });
    // What decides where a write lands and which ACL rule applies: frozen, so a handler cannot
    // point its writes at another tenant's task or give its task another type (TypeError).
    const scope: Assignment = Object.freeze({ ...a, owner: Object.freeze({ ...a.owner }) });
    return new SessionContext(
      deps,
      scope,
      conversation,
      deepFreeze(task),
      agent,
      history,
      summary,
      shared,
    );
  }

  /** Whose writes this execution sees: the succeeded executions' and its own delivery's. */
  private get reader(): SharedReader {
    return { task: this.task, delivery: this.delivery };
  }

  /** The current user message this execution answers. */
  get question(): string {
    return this.task.userIntent;
  }

  getRecentHistory(maxTurns: number): ConversationMessage[] {
    return recentTurns(this.history, maxTurns);
  }

  getHistoryWithinBudget(maxTokens: number): ConversationMessage[] {
    return withinTokenBudget(this.history, maxTokens);
  }

  getSharedData<T = unknown>(key: string): T | undefined {
    return ownEntry(this.sharedView, key)?.value as T | undefined;
  }

  get shared(): Readonly<Record<string, SharedEntry>> {
    return this.sharedView;
  }

  /**
   * Writes one task-shared key atomically, with this agent as writer, subject to the ACL:
   * ACCESS_DENIED (audited) for a protected key this agent type may not write; an overwrite of
   * another agent's value is logged with both agents and audited. The value is redacted first
   * when stored redaction is configured. Bounded: a key of 1 to MAX_SHARED_KEY_CHARS
   * identifier characters (SHARED_KEY_PATTERN; with stored redaction, none redaction changes), a value of at most MAX_SHARED_VALUE_JSON_CHARS of JSON as stored (redacted),
   * at most MAX_SHARED_KEYS keys a task (VALIDATION_FAILED, PAYLOAD_TOO_LARGE; nothing written).
   * The key count is read before the write, not checked in it: agents of one task writing new
   * keys at the same moment may each pass it, so a task can end up with a few more (at most one
   * more per agent writing at once).
   */
  async putSharedData(key: string, raw: unknown): Promise<void> {
    const a = this.assignment;
    if (typeof key !== 'string' || !SHARED_KEY_PATTERN.test(key))
      throw new LoomError(
        LoomErrorCode.VALIDATION_FAILED,
        `a shared key is 1 to ${MAX_SHARED_KEY_CHARS} letters, digits and _ . : -`,
      );
    // With stored redaction, a key whose name redaction would change (a phone or resident id
    // number in it) is refused: key names are stored, audited and logged as they are.
    if (this.deps.acl.storable(key) !== key)
      throw new LoomError(
        LoomErrorCode.VALIDATION_FAILED,
        'a shared key may not carry personal data (a phone or id number)',
      );
    // A write the ACL denies is ACCESS_DENIED and audited as such, whatever its size or the
    // task's key count: those limits must not hide a denied write from the audit trail.
    if (this.deniedByAcl(key)) {
      await this.deps.beforeWrite?.();
      const latest = await this.deps.tasks.sharedFor(a.owner, this.reader);
      await this.authorizeWrite(key, ownEntry(latest, key)?.writer ?? null); // throws, audited
    }
    const what = `the value of shared key "${key}"`;
    const rawChars = jsonChars(raw, what); // a BigInt or a cycle is refused as sent
    // The limit is the stored value's: redaction may lengthen it ([REDACTED_PHONE] for 11 digits).
    const value = this.deps.acl.storable(raw);
    const chars = value === raw ? rawChars : jsonChars(value, what);
    if (chars > MAX_SHARED_VALUE_JSON_CHARS)
      throw tooLarge(what, chars, MAX_SHARED_VALUE_JSON_CHARS);
    await this.deps.beforeWrite?.(); // before the ACL audits a write that would not happen
    const writes = await this.deps.tasks.sharedWrites(a.owner, a.conversationId, a.taskId);
    const latest = foldShared(writes, this.reader);
    const readTo = writes.at(-1)?.index ?? 0;
    const previousWriter = ownEntry(latest, key)?.writer ?? null;
    if (!Object.hasOwn(latest, key) && Object.keys(latest).length >= MAX_SHARED_KEYS)
      throw new LoomError(
        LoomErrorCode.PAYLOAD_TOO_LARGE,
        `the task already has ${MAX_SHARED_KEYS} shared keys: "${key}" would be one more`,
      );
    const decision = await this.authorizeWrite(key, previousWriter);
    const write = {
      key,
      value,
      writer: a.agentType,
      // The deployment's clock, as the task's own times (a TaskView shows them side by side).
      updatedAt: this.deps.conversations.now(),
      execution: a.agentSessionId,
      delivery: this.delivery,
    };
    const index = await this.deps.tasks.appendShared(
      a.owner,
      a.conversationId,
      a.taskId,
      write,
      a.agentSessionId,
    );
    this.written.add(key);
    let overwrites = decision.overwrites;
    if (index > readTo + 1) {
      // Other writes came between the read and this one (an agent of the same wave): the value
      // this write replaced may be another agent's, which the read did not show.
      const between = await this.deps.tasks.sharedWrites(
        a.owner,
        a.conversationId,
        a.taskId,
        readTo,
      );
      const replaced = between.filter((w) => w.index < index && w.value.key === key).at(-1);
      const racer = replaced?.value.writer;
      if (racer && racer !== a.agentType && racer !== overwrites) {
        await this.authorizeWrite(key, racer);
        overwrites = racer;
      }
    }
    if (overwrites) {
      const event = {
        key,
        writer: a.agentType,
        previousWriter: overwrites,
        taskId: a.taskId,
      };
      if (this.deps.onOverwrite) this.deps.onOverwrite(event);
      else log.warn({ msg: 'shared key overwritten', ...event });
    }
    // As foldShared: the key's time does not go back when the value it replaces was stamped later.
    const before = ownEntry(latest, key)?.updatedAt;
    const updatedAt =
      before !== undefined && Date.parse(before) > Date.parse(write.updatedAt)
        ? before
        : write.updatedAt;
    this.sharedView = { ...latest, [key]: { value, writer: write.writer, updatedAt } };
  }

  /** Whether the ACL denies this agent type `key` in this task (the pure check, nothing audited). */
  private deniedByAcl(key: string): boolean {
    try {
      this.deps.acl.check(this.task.taskType, key, this.assignment.agentType, null);
      return false;
    } catch (err) {
      if (LoomError.is(err, LoomErrorCode.ACCESS_DENIED)) return true;
      throw err;
    }
  }

  /** The ACL's decision on this agent's write of `key`, logged and audited (ACCESS_DENIED). */
  private authorizeWrite(key: string, previousWriter: string | null) {
    const a = this.assignment;
    return this.deps.acl.authorize({
      owner: a.owner,
      conversationId: a.conversationId,
      taskId: a.taskId,
      taskType: this.task.taskType,
      key,
      writer: a.agentType,
      previousWriter,
      agentSessionId: a.agentSessionId,
      at: this.deps.conversations.now(), // the deployment's clock, no round trip
    });
  }

  getUserProfile(): UserProfile {
    return this.conversation.userProfile;
  }

  getTaskGoal(): string {
    return this.task.userIntent;
  }

  /**
   * Private working memory of this agent session only, stored with it when the execution ends:
   * at most MAX_MEMORY_JSON_CHARS of JSON in all (PAYLOAD_TOO_LARGE, and the key keeps its
   * earlier value), each value measured as it is when remembered (one changed afterwards is
   * measured again only when remembered again).
   */
  remember(key: string, value: unknown): void {
    const memory = this.agent.localMemory;
    // A running count, not the whole memory serialised again on every call: the JSON of an
    // object is `{`, its entries (`"key":value`, none for a value JSON leaves out) joined by `,`,
    // and `}`. Each entry is measured as JSON.stringify measures it in place (toJSON gets its key).
    if (!this.memorySizes) {
      this.memorySizes = measureEntries(memory);
      this.memoryBodyChars = [...this.memorySizes.values()].reduce((a, b) => a + b, 0);
    }
    const sizes = this.memorySizes;
    const entry = entryChars(key, value, `the memory value "${key}"`);
    const old = sizes.get(key) ?? 0;
    const count = sizes.size - (sizes.has(key) ? 1 : 0) + (entry > 0 ? 1 : 0);
    const body = this.memoryBodyChars - old + entry;
    const chars = 2 + body + Math.max(count - 1, 0);
    if (chars > MAX_MEMORY_JSON_CHARS)
      throw tooLarge(`private memory with "${key}"`, chars, MAX_MEMORY_JSON_CHARS);
    Object.defineProperty(memory, key, {
      value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
    if (entry > 0) sizes.set(key, entry);
    else sizes.delete(key);
    this.memoryBodyChars = body;
  }

  /** This agent session's private memory; another agent session's is ACCESS_DENIED. */
  getAgentMemory(
    agentSessionId = this.assignment.agentSessionId,
  ): Readonly<Record<string, unknown>> {
    this.assertInScope({ agentSessionId });
    return this.agent.localMemory;
  }

  /** ACCESS_DENIED unless every id given is the assigned one (another conversation, task or agent session). */
  assertInScope(ids: { conversationId?: string; taskId?: string; agentSessionId?: string }): void {
    const a = this.assignment;
    if (ids.conversationId !== undefined && ids.conversationId !== a.conversationId)
      throw outside('conversation');
    if (ids.taskId !== undefined && ids.taskId !== a.taskId) throw outside('task');
    if (ids.agentSessionId !== undefined && ids.agentSessionId !== a.agentSessionId)
      throw outside('agent session');
  }

  buildSystemPrompt(agentRole: string): string {
    const lines = [`You are ${agentRole}.`, '', `Current task goal: ${this.getTaskGoal()}`];
    if (this.summary)
      lines.push(
        '',
        `Summary of earlier conversation (seq ${this.summary.fromSeq}-${this.summary.toSeq}): ${this.summary.text}`,
      );
    const keys = Object.keys(this.sharedView);
    if (keys.length) {
      lines.push('', 'Information other agents already provided:');
      for (const k of keys)
        lines.push(
          `- ${k} (from ${this.sharedView[k].writer}): ${JSON.stringify(this.sharedView[k].value)}`,
        );
    }
    const style = this.conversation.userProfile.preferredResponseStyle;
    if (style) lines.push('', `Preferred response style: ${style}`);
    return lines.join('\n');
  }

  /** The task-shared keys this execution wrote, sorted. */
  get sharedKeysWritten(): string[] {
    return [...this.written].sort();
  }

  /** What this execution was shown, for TaskView `context`. */
  report(): ContextReport {
    return {
      historyMessages: this.history.length,
      summaryIncluded: this.summary !== null,
      sharedKeys: Object.keys(this.sharedView).sort(),
    };
  }
}

const log = new Logger('SessionContext');

function outside(what: string): LoomError {
  return new LoomError(LoomErrorCode.ACCESS_DENIED, `the assignment does not cover that ${what}`);
}

/** `value` and everything it holds made read-only, in place (the task, as the execution read it). */
function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  Object.freeze(value);
  for (const inner of Object.values(value)) deepFreeze(inner);
  return value;
}

/** Own properties only: a shared key may be named like an Object member (`constructor`). */
function ownEntry<T>(table: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

/** Characters of `"key":value` as JSON writes it inside an object (0: JSON leaves it out). */
function entryChars(key: string, value: unknown, what: string): number {
  const holder = {};
  Object.defineProperty(holder, key, { value, enumerable: true });
  return jsonChars(holder, what) - 2;
}

/** entryChars of every entry of `memory` that JSON writes. */
function measureEntries(memory: Record<string, unknown>): Map<string, number> {
  const sizes = new Map<string, number>();
  for (const key of Object.keys(memory)) {
    const chars = entryChars(key, memory[key], 'private memory');
    if (chars > 0) sizes.set(key, chars);
  }
  return sizes;
}
