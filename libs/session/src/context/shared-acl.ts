import { Logger } from '@nestjs/common';
import { Owner } from '../conversation/owner';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { AuditDecision, AuditSink } from './audit-log';

export * from './audit-log';

/** Protected shared keys per task type: key → agent types allowed to write it (seed 000); `*` = every task type. */
export type SharedAclRules = Record<string, Record<string, string[]>>;

/**
 * A task type or key as rules name it, matched exactly: no `*` in it (only the task type `*`
 * itself, the rules for every type), since `research.*` or `follow-*` would look like a family
 * of keys or types protected while matching none.
 */
const NAME = /^[A-Za-z0-9_.:-]{1,160}$/;

/**
 * Checks the shape of ACL rules from configuration (LOOM_SHARED_ACL): an object of task types,
 * each an object of keys, each a non-empty list of agent types. Returns the rules or throws an
 * Error saying what is wrong.
 */
export function parseSharedAclRules(input: unknown): SharedAclRules {
  const raw = typeof input === 'string' ? (JSON.parse(input) as unknown) : input;
  const isObject = (v: unknown): v is Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!isObject(raw)) throw new Error('must be a JSON object of task types');
  // Null-prototype objects: a task type or key named `__proto__` is a rule like any other.
  const rules: SharedAclRules = Object.create(null) as SharedAclRules;
  for (const [taskType, keys] of Object.entries(raw)) {
    if (taskType !== '*' && !NAME.test(taskType))
      throw new Error(`bad task type ${JSON.stringify(taskType)}`);
    if (!isObject(keys)) throw new Error(`${taskType} must map keys to writer lists`);
    rules[taskType] = Object.create(null) as Record<string, string[]>;
    for (const [key, writers] of Object.entries(keys)) {
      if (!NAME.test(key)) throw new Error(`bad key ${JSON.stringify(key)}`);
      if (
        !Array.isArray(writers) ||
        writers.length === 0 ||
        !writers.every((w) => typeof w === 'string' && /^[a-z0-9-]{2,64}$/.test(w))
      )
        throw new Error(`${taskType}.${key} must list agent types`);
      rules[taskType][key] = writers as string[];
    }
  }
  return rules;
}

export interface AclDecision {
  /** Set when the write replaces another agent's value: audit with both agents. */
  overwrites: string | null;
  /** The key has declared writers (a protected key). */
  protected: boolean;
}

export interface SharedWriteAttempt {
  owner: Owner;
  conversationId: string;
  taskId: string;
  taskType: string;
  key: string;
  writer: string;
  previousWriter: string | null;
  /**
   * The agent execution making the write: its audit entry is then written like its other writes,
   * only while its task runs it (not into a conversation re-created under the same id).
   */
  agentSessionId?: string;
  /**
   * When (ISO), on the deployment's clock (SharedClock) as the task's times: what the audit
   * entry records. This host's clock without it.
   */
  at?: string;
}

export interface SharedContextAclOptions {
  /** Where decisions are recorded durably (the conversation's `audit` list). */
  audit?: AuditSink;
  /** Applied to every shared value before it is stored (LOOM_REDACT_STORED). */
  redactValue?: (value: unknown) => unknown;
}

/**
 * Seed 000's SessionAccessController: a protected key may be written only by its declared
 * writers for the task type (`*` declares rules for every type); keys named `protected.*`
 * without a rule are writable by nobody. Overwrites of another agent's value are allowed but
 * reported. Denials (ACCESS_DENIED), protected writes and overwrites are audited.
 */
export class SharedContextAcl {
  private readonly log = new Logger('SharedContextAcl');

  constructor(
    private readonly rules: SharedAclRules = {},
    private readonly opts: SharedContextAclOptions = {},
  ) {}

  /** The pure decision: ACCESS_DENIED when `writer` may not write `key` in a task of `taskType`. */
  check(taskType: string, key: string, writer: string, previousWriter: string | null): AclDecision {
    const writers = this.writersOf(taskType, key);
    if ((writers && !writers.includes(writer)) || (!writers && key.startsWith('protected.'))) {
      throw new LoomError(
        LoomErrorCode.ACCESS_DENIED,
        `agent ${writer} may not write protected key ${key}`,
        { key, writer, allowed: writers ?? [] },
      );
    }
    return {
      overwrites: previousWriter && previousWriter !== writer ? previousWriter : null,
      protected: writers !== undefined,
    };
  }

  /** check(), with the decision logged and audited: denials, writes of protected keys and overwrites. */
  async authorize(a: SharedWriteAttempt): Promise<AclDecision> {
    let decision: AclDecision;
    try {
      decision = this.check(a.taskType, a.key, a.writer, a.previousWriter);
    } catch (err) {
      this.log.warn({
        msg: 'shared-context write denied',
        key: a.key,
        writer: a.writer,
        previousWriter: a.previousWriter,
        decision: 'DENIED',
      });
      await this.audit(a, 'DENIED');
      throw err;
    }
    if (decision.overwrites) await this.audit(a, 'OVERWRITE');
    else if (decision.protected) await this.audit(a, 'ALLOWED');
    return decision;
  }

  /** The value as it may be stored (redacted when so configured). */
  storable(value: unknown): unknown {
    return this.opts.redactValue ? this.opts.redactValue(value) : value;
  }

  /** Own properties only: an agent's key may be named like an Object method (`constructor`). */
  private writersOf(taskType: string, key: string): string[] | undefined {
    return ownRule(ownRule(this.rules, taskType), key) ?? ownRule(ownRule(this.rules, '*'), key);
  }

  private async audit(a: SharedWriteAttempt, decision: AuditDecision): Promise<void> {
    if (!this.opts.audit) return;
    try {
      await this.opts.audit.record(
        a.owner,
        a.conversationId,
        {
          at: a.at ?? new Date().toISOString(),
          taskId: a.taskId,
          agentType: a.writer,
          key: a.key,
          decision,
          previousWriter:
            a.previousWriter && a.previousWriter !== a.writer ? a.previousWriter : null,
        },
        a.agentSessionId,
      );
    } catch (err) {
      this.log.error({
        msg: 'could not record an audit entry',
        key: a.key,
        decision,
        err: err instanceof Error ? err.message : String(err),
      });
    }
  }
}

function ownRule<T>(table: Record<string, T> | undefined, name: string): T | undefined {
  return table && Object.hasOwn(table, name) ? table[name] : undefined;
}
