import { isDamagedData, LoomError, LoomErrorCode } from '../errors/session-error';
import { assertId, newId } from '../ids';
import {
  ConversationMeta,
  ConversationMessage,
  ConversationStatus,
  ConversationSummary,
  emptyUsage,
} from '../model/conversation.model';
import { countTokens } from '../context/token-counter';
import { StateKeys } from '../model/state-keys';
import { SessionStore, SessionSummary } from '../store/session-store';
import { Owner, OwnerCheckingStore } from './owner';
import { isSystemId } from './system.repository';

const DAY_MS = 86_400_000;
/** Conversations a listing reads at once (each a Redis read, or a MySQL one when cold). */
const LIST_READS_AT_ONCE = 4;

/** `fn` of every item, in order, with at most `width` of them running at once. */
async function mapInTurns<T, R>(items: T[], width: number, fn: (item: T) => Promise<R>) {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  return out;
}

/**
 * The conversation layer on top of the Session API: creation that never adopts someone else's
 * id, ownership checks that answer "not found" for another user or tenant, and the append-only
 * message log with contiguous seqs.
 */
export class ConversationRepository {
  constructor(
    private readonly store: SessionStore,
    private readonly opts: {
      idleExpiryDays: number;
      systemId?: string;
      /**
       * The deployment's clock (SharedClock) for the times it writes: a conversation's messages
       * are appended by whichever replica runs the turn, so their createdAt follow their seq
       * only on one clock. This host's Date.now() without it (one process).
       */
      clock?: { now(): number };
    },
  ) {}

  /** Now, as the times of messages and conversations are written (the deployment's clock). */
  now(): string {
    return new Date(this.nowMs()).toISOString();
  }

  private nowMs(): number {
    return this.opts.clock?.now() ?? Date.now();
  }

  /** Creates a conversation; a requested id owned by someone else yields a fresh id (seed 002). */
  async create(
    owner: Owner,
    requestedId?: string,
    metadata: Record<string, unknown> = {},
  ): Promise<{ meta: ConversationMeta; created: boolean }> {
    if (requestedId !== undefined) {
      const adopted = await this.adopt(owner, requestedId, metadata);
      if (adopted) return adopted;
    }
    for (;;) {
      const meta = this.newMeta(owner, newId('c'), metadata);
      if (
        await this.store.create(
          { tenantId: owner.tenantId },
          meta.conversationId,
          StateKeys.conversation,
          meta,
          this.writeOpts(owner, meta),
        )
      ) {
        return { meta, created: true };
      }
    }
  }

  /**
   * The conversation of exactly `requestedId`: created, or the caller's own that exists; null
   * when the id is someone else's (or a system id), writing nothing then (the legacy importer).
   */
  async adopt(
    owner: Owner,
    requestedId: string,
    metadata: Record<string, unknown> = {},
  ): Promise<{ meta: ConversationMeta; created: boolean } | null> {
    // A system session id is never adopted: it gets a server-issued id like any id that is taken.
    if (isSystemId(assertId(requestedId, 'conversationId'))) return null;
    const scope = { tenantId: owner.tenantId };
    const meta = this.newMeta(owner, requestedId, metadata);
    // Adopted only while no session at all has that id: a task's id (the sessions share one
    // namespace) is as taken as another owner's conversation, and so is another tenant's
    // session, which the store reports as NOT_FOUND. A fencing counter alone does not keep the
    // id from its own tenant (a turn that waited for the lock of a conversation deleted
    // meanwhile leaves one); it does keep it from other tenants until the sweeper removes it.
    const created =
      (await this.store.listSessionKeys(scope, requestedId)).length === 0 &&
      (await this.store
        .create(scope, requestedId, StateKeys.conversation, meta, this.writeOpts(owner, meta))
        .catch((err) => {
          if (LoomError.is(err, LoomErrorCode.NOT_FOUND)) return false;
          throw err;
        }));
    if (created) return { meta, created: true };
    const existing = await this.find(owner, requestedId).catch((err) => {
      if (LoomError.is(err, LoomErrorCode.NOT_FOUND)) return null;
      throw err;
    });
    return existing ? { meta: existing, created: false } : null;
  }

  /**
   * The caller's conversation, or null when it is missing or not theirs (indistinguishable). One
   * whose record is damaged (a file of the embedded profile) is the damaged-data error to the
   * user the store recorded as its writer, and null (not found) to anyone else.
   */
  async find(
    owner: Owner,
    conversationId: string,
    consistent = false,
  ): Promise<ConversationMeta | null> {
    assertId(conversationId, 'conversationId');
    const isOwners = (m: ConversationMeta) =>
      m.userId === owner.userId && m.tenantId === owner.tenantId;
    const meta = await this.getMeta(owner, conversationId, consistent, isOwners).catch(
      async (err) => {
        if (isDamagedData(err) && !(await this.wrote(owner, conversationId))) return null;
        throw err;
      },
    );
    // Checked here too, whichever store answered: only the tiered one takes `owned`.
    return meta && isOwners(meta) ? meta : null;
  }

  /** Like find, but NOT_FOUND instead of null. */
  async get(owner: Owner, conversationId: string, consistent = false): Promise<ConversationMeta> {
    const meta = await this.find(owner, conversationId, consistent);
    if (!meta) throw new LoomError(LoomErrorCode.NOT_FOUND, 'conversation not found');
    return meta;
  }

  async save(owner: Owner, meta: ConversationMeta, fence?: number): Promise<void> {
    meta.expiresAt = new Date(this.nowMs() + this.opts.idleExpiryDays * DAY_MS).toISOString();
    await this.store.save(
      { tenantId: owner.tenantId },
      meta.conversationId,
      StateKeys.conversation,
      meta,
      { ...this.writeOpts(owner, meta), fence },
    );
  }

  /**
   * Appends to the log; returns the message with its seq. Fenced when a lock is held. `at`: the
   * seq it must take (CONFLICT if taken), for a caller that recorded it beforehand.
   */
  async appendMessage(
    owner: Owner,
    conversationId: string,
    message: Omit<ConversationMessage, 'seq'>,
    fence?: number,
    at?: number,
  ): Promise<ConversationMessage> {
    // Counted once here, so no reader has to tokenize history again (token budgets, usage).
    const counted = { ...message, tokens: message.tokens || countTokens(message.content) };
    const seq = await this.store.append(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.messages,
      counted,
      { fence, index: at },
    );
    return { ...counted, seq };
  }

  /** Messages in seq order: after a seq, the last N, or a page. */
  async messages(
    owner: Owner,
    conversationId: string,
    range: { afterSeq?: number; last?: number; limit?: number } = {},
  ): Promise<ConversationMessage[]> {
    const items = await this.store.getList<ConversationMessage>(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.messages,
      {
        afterIndex: range.afterSeq,
        last: range.last,
        limit: range.limit,
      },
    );
    return items.map((i) => ({ ...i.value, seq: i.index }));
  }

  /** The newest seq (0: no messages); `consistent`: as the durable store has it. */
  async messageCount(owner: Owner, conversationId: string, consistent = false): Promise<number> {
    const store = this.store as SessionStore & {
      listLength(s: unknown, id: string, key: string, consistent?: boolean): Promise<number>;
    };
    return store.listLength(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.messages,
      consistent,
    );
  }

  async summary(owner: Owner, conversationId: string): Promise<ConversationSummary | null> {
    return this.store.get<ConversationSummary>(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.summary,
    );
  }

  async saveSummary(
    owner: Owner,
    conversationId: string,
    summary: ConversationSummary,
    fence?: number,
  ): Promise<void> {
    await this.store.save(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.summary,
      summary,
      { fence },
    );
  }

  /**
   * The caller's conversations, newest first. `next`: where the next page starts (the cursor),
   * null when this page was the last. Decided by the rows listed, not by the conversations read
   * back: one deleted in between leaves this page short, not the listing cut off.
   */
  async list(
    owner: Owner,
    page: { limit: number; before?: { updatedAt: Date; sessionId: string } },
  ): Promise<{ items: ConversationMeta[]; next: SessionSummary | null }> {
    const rows = await this.store.listSessions(
      { tenantId: owner.tenantId },
      StateKeys.conversation,
      { ...page, userId: owner.userId },
    );
    // One conversation damaged on disk (embedded profile; the store logs its file) is left out:
    // the others stay listed. A few at a time: a page read from MySQL (a cold hot tier) all at
    // once queued up to 100 statements per listing, and listings together overflowed the pool's
    // queue, failing them and every other request with 503 while MySQL answered.
    const metas = await mapInTurns(rows, LIST_READS_AT_ONCE, (r) =>
      this.find(owner, r.sessionId).catch((err: unknown) => {
        if (isDamagedData(err)) return null;
        throw err;
      }),
    );
    return {
      items: metas.filter((m): m is ConversationMeta => m !== null),
      next: rows.length > 0 && rows.length === page.limit ? rows[rows.length - 1] : null,
    };
  }

  /** Removes the conversation with its messages, tasks, agent sessions and summary, everywhere. */
  async delete(owner: Owner, conversationId: string): Promise<void> {
    await this.getForRemoval(owner, conversationId, true);
    await this.purge(owner.tenantId, conversationId);
  }

  /**
   * Like get, for a removal: a conversation whose record is damaged is still its writer's to
   * remove (else they could never be rid of it), and is null then; NOT_FOUND to anyone else.
   */
  async getForRemoval(
    owner: Owner,
    conversationId: string,
    consistent = false,
  ): Promise<ConversationMeta | null> {
    return this.get(owner, conversationId, consistent).catch((err: unknown) => {
      if (isDamagedData(err)) return null; // find let it through: the caller wrote it
      throw err;
    });
  }

  /**
   * The sweeper's delete: the whole conversation of a tenant, without an owner check. Returns
   * the ids of the tasks it removed.
   */
  async purge(tenantId: string, conversationId: string): Promise<string[]> {
    const scope = { tenantId };
    const taskIds = await this.store.getList<string>(scope, conversationId, StateKeys.tasks);
    for (const t of taskIds) await this.store.delete(scope, t.value);
    await this.store.delete(scope, conversationId);
    return taskIds.map((t) => t.value);
  }

  /** The conversation's meta as the durable store has it, whoever owns it (sweeper, recovery). */
  async metaOf(tenantId: string, conversationId: string): Promise<ConversationMeta | null> {
    return this.getMeta({ tenantId, userId: '' }, conversationId, true);
  }

  /**
   * Drops every cached copy of the conversation so the next reads come from the durable store
   * (recovery: a process killed between its MySQL commit and its Redis write left a stale copy).
   */
  async refresh(conversationId: string): Promise<void> {
    const store = this.store as SessionStore & { invalidate?: (sid: string) => Promise<void> };
    await store.invalidate?.(conversationId);
  }

  /** The assistant message answering `taskId`, if one was appended after `afterSeq`. */
  async findReply(
    owner: Owner,
    conversationId: string,
    taskId: string,
    afterSeq: number,
  ): Promise<ConversationMessage | null> {
    for (let after = afterSeq; ;) {
      const page = await this.messages(owner, conversationId, { afterSeq: after, limit: 200 });
      const hit = page.find((m) => m.role === 'assistant' && m.taskId === taskId);
      if (hit) return hit;
      if (page.length < 200) return null;
      after = page[page.length - 1].seq;
    }
  }

  /**
   * Whether the store recorded `owner` as the writer of the conversation's record: what tells its
   * owner when the record itself cannot be read. Pages through the user's own conversations (rare:
   * only for a damaged record).
   */
  private async wrote(owner: Owner, conversationId: string): Promise<boolean> {
    const scope = { tenantId: owner.tenantId };
    const limit = 500;
    for (let before: SessionSummary | undefined; ;) {
      const rows = await this.store.listSessions(scope, StateKeys.conversation, {
        limit,
        before,
        userId: owner.userId,
      });
      if (rows.some((r) => r.sessionId === conversationId)) return true;
      if (rows.length < limit) return false;
      before = rows[rows.length - 1];
    }
  }

  /**
   * `owned`: another's record costs the tiers a missing one does (TieredSessionStore.get), so the
   * time of a 404 does not tell that the id exists.
   */
  private async getMeta(
    owner: Owner,
    conversationId: string,
    consistent: boolean,
    owned?: (meta: ConversationMeta) => boolean,
  ): Promise<ConversationMeta | null> {
    return (this.store as OwnerCheckingStore).get<ConversationMeta>(
      { tenantId: owner.tenantId },
      conversationId,
      StateKeys.conversation,
      consistent,
      owned,
    );
  }

  private newMeta(
    owner: Owner,
    conversationId: string,
    metadata: Record<string, unknown>,
  ): ConversationMeta {
    const now = this.now();
    return {
      conversationId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      systemId: this.opts.systemId ?? 'loom',
      title: null,
      status: ConversationStatus.ACTIVE,
      currentIntent: null,
      language: null,
      userProfile: {},
      userContext: {},
      metadata,
      activeTaskIds: [],
      usage: emptyUsage(),
      messageCount: 0,
      createdAt: now,
      lastActiveAt: now,
      expiresAt: new Date(this.nowMs() + this.opts.idleExpiryDays * DAY_MS).toISOString(),
    };
  }

  private writeOpts(owner: Owner, meta: ConversationMeta) {
    return { userId: owner.userId, expiresAt: new Date(meta.expiresAt) };
  }
}
