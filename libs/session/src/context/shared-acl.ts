import { LoomError, LoomErrorCode } from '../errors/session-error';

/** Protected shared keys per task type: key → agent types allowed to write it (seed 000). */
export type SharedAclRules = Record<string, Record<string, string[]>>;

export interface AclDecision {
  /** Set when the write replaces another agent's value: audit with both agents. */
  overwrites: string | null;
}

/**
 * Seed 000's SessionAccessController: a protected key may be written only by its declared
 * writers for the task type (`*` declares rules for every type); keys named `protected.*`
 * without a rule are writable by nobody. Overwrites of another agent's value are allowed but reported.
 */
export class SharedContextAcl {
  constructor(private readonly rules: SharedAclRules = {}) {}

  check(taskType: string, key: string, writer: string, previousWriter: string | null): AclDecision {
    const writers = this.rules[taskType]?.[key] ?? this.rules['*']?.[key];
    if ((writers && !writers.includes(writer)) || (!writers && key.startsWith('protected.'))) {
      throw new LoomError(
        LoomErrorCode.ACCESS_DENIED,
        `agent ${writer} may not write protected key ${key}`,
        {
          key,
          writer,
          allowed: writers ?? [],
        },
      );
    }
    return { overwrites: previousWriter && previousWriter !== writer ? previousWriter : null };
  }
}
