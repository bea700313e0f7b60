import { Owner } from '../conversation/owner';
import { StateKeys } from '../model/state-keys';
import { SessionStore } from '../store/session-store';

/** The state key of a conversation's security audit trail (a list, oldest first). */
export const AUDIT_KEY = 'audit';

export type AuditDecision = 'DENIED' | 'ALLOWED' | 'OVERWRITE';

/** One shared-context decision worth keeping: who tried to write what, and what happened. */
export interface AuditEntry {
  at: string;
  taskId: string;
  agentType: string;
  key: string;
  decision: AuditDecision;
  /** The writer whose value was (or would have been) replaced, if another agent's. */
  previousWriter: string | null;
}

export interface AuditSink {
  /** `agentSessionId`: an agent execution's entry, recorded only while its task runs it. */
  record(
    owner: Owner,
    conversationId: string,
    entry: AuditEntry,
    agentSessionId?: string,
  ): Promise<void>;
}

/**
 * The durable audit trail: an append-only `audit` list in the conversation's own partition
 * (MySQL first, then Redis), so it survives restarts and goes with the conversation when it is
 * deleted. Tenant-scoped like every other store call.
 */
export class StoreAuditLog implements AuditSink {
  constructor(private readonly store: SessionStore) {}

  async record(
    owner: Owner,
    conversationId: string,
    entry: AuditEntry,
    agentSessionId?: string,
  ): Promise<void> {
    // An execution's entry is guarded like its other writes (SUPERSEDED once its task no longer
    // runs it): a late agent's entry never lands in a conversation re-created under the same id.
    const execution = agentSessionId
      ? { taskKey: StateKeys.task(entry.taskId), agentSessionId }
      : undefined;
    await this.store.append({ tenantId: owner.tenantId }, conversationId, AUDIT_KEY, entry, {
      execution,
    });
  }

  async entries(owner: Owner, conversationId: string): Promise<AuditEntry[]> {
    const items = await this.store.getList<AuditEntry>(
      { tenantId: owner.tenantId },
      conversationId,
      AUDIT_KEY,
    );
    return items.map((i) => i.value);
  }
}
