import { promises as fs } from 'fs';
import * as path from 'path';
import { ConversationRepository } from '../conversation/conversation.repository';
import { Owner } from '../conversation/owner';
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { isValidId } from '../ids';
import { StateKeys } from '../model/state-keys';
import { SessionStore } from '../store/session-store';
import { TieredSessionStore } from '../store/tiered/tiered-session.store';
import { decodeLegacyFile, LegacyMessage, parseLegacySession } from './legacy-document';

export interface ImportResult {
  file: string;
  sessionId: string | null;
  status: 'imported' | 'resumed' | 'unchanged' | 'skipped';
  messages: number;
  reason?: string;
}

/**
 * Imports old whole-document sessions (seed 003's migration section) into the item table: the
 * file name is the conversation id, each message becomes one row with its seq. Re-running is safe:
 * messages already imported are not written again, and an id owned by someone else is skipped.
 */
export class LegacyImporter {
  private readonly conversations: ConversationRepository;

  constructor(
    private readonly store: SessionStore,
    idleExpiryDays = 30,
  ) {
    this.conversations = new ConversationRepository(store, { idleExpiryDays });
  }

  async importFile(owner: Owner, file: string): Promise<ImportResult> {
    // As for API tokens: `_` tenants are Loom's own (the run index, the agent catalog).
    if (owner.tenantId.startsWith('_'))
      throw new LoomError(
        LoomErrorCode.VALIDATION_FAILED,
        'tenant ids starting with _ are reserved for Loom itself',
      );
    const sessionId = path.basename(file).replace(/\.json$/, '');
    if (!isValidId(sessionId))
      return {
        file,
        sessionId: null,
        status: 'skipped',
        messages: 0,
        reason: 'the file name is not a valid session id',
      };
    let parsed;
    try {
      parsed = parseLegacySession(decodeLegacyFile(await fs.readFile(file)));
    } catch (err) {
      return { file, sessionId, status: 'skipped', messages: 0, reason: (err as Error).message };
    }
    // Exactly this id or nothing: a conversation under a fresh id, deleted again, would be left
    // behind by a run stopped in between.
    const adopted = await this.conversations.adopt(owner, sessionId, { importedFrom: 'legacy' });
    if (!adopted)
      return {
        file,
        sessionId,
        status: 'skipped',
        messages: 0,
        reason: 'the id belongs to another owner',
      };
    const { created } = adopted;
    // A run that lost Redis part-way (see the CLI) may have left Redis an older copy of the
    // conversation than MySQL's: it is dropped, so what follows reads MySQL and the apps refill.
    if (this.store instanceof TieredSessionStore)
      await this.store.dropHotCopies({ tenantId: owner.tenantId }, sessionId, [
        StateKeys.conversation,
        StateKeys.messages,
      ]);
    const already = await this.conversations.messageCount(owner, sessionId, true);
    // What the log already holds must be this file's messages, in order: another file with the
    // same id (a second export directory) or a log that took other messages between an
    // interrupted run and this one would otherwise get the file's tail appended after them.
    const differs = await this.firstDifference(owner, sessionId, parsed.messages, already);
    if (differs !== null)
      return {
        file,
        sessionId,
        status: 'skipped',
        messages: 0,
        reason: `the conversation already holds other messages than this file (seq ${differs} differs)`,
      };
    const createdAt = new Date().toISOString();
    // Counted message by message: a run stopped part-way (Ctrl-C, a lost connection) leaves the
    // conversation's count at the messages it holds, not at what it had before the run.
    for (const m of parsed.messages.slice(already)) {
      const { seq } = await this.conversations.appendMessage(owner, sessionId, {
        ...m,
        agentType: null,
        taskId: null,
        createdAt,
        tokens: 0,
      });
      await this.countAtLeast(owner, sessionId, seq);
    }
    // Nothing of the file is dropped: what is neither a message nor a value under a key name
    // Loom takes (a system or tool message, an image, a key with spaces) is kept as it was in
    // `legacy:unimported`, and `memory`'s other fields in `legacy:memory`.
    const scope = { tenantId: owner.tenantId };
    const unnamed: Record<string, unknown> = {};
    const state = { ...parsed.state, ...(parsed.memory ? { memory: parsed.memory } : {}) };
    for (const [key, value] of Object.entries(state)) {
      if (/^[A-Za-z0-9_.-]{1,100}$/.test(key) && key !== 'unimported')
        await this.store.save(scope, sessionId, `legacy:${key}`, value);
      else unnamed[key] = value;
    }
    if (parsed.skipped.length || Object.keys(unnamed).length)
      await this.store.save(scope, sessionId, 'legacy:unimported', {
        messages: parsed.skipped.map(({ index, message }) => ({ index, message })),
        state: unnamed,
      });
    const added = parsed.messages.length - Math.min(already, parsed.messages.length);
    await this.countAtLeast(owner, sessionId, already + added);
    const status = created ? 'imported' : added > 0 ? 'resumed' : 'unchanged';
    return {
      file,
      sessionId,
      status,
      messages: added,
      reason: parsed.skipped.length
        ? `${parsed.skipped.length} messages not imported as messages (kept in legacy:unimported)`
        : undefined,
    };
  }

  /**
   * Sets the conversation's count to `count` unless it is higher: a conversation that went on
   * after its import has more messages than the file, and a re-run must not set its count back.
   * Saved also when unchanged: it renews the conversation's expiry.
   */
  private async countAtLeast(owner: Owner, sessionId: string, count: number): Promise<void> {
    const meta = await this.conversations.get(owner, sessionId, true);
    meta.messageCount = Math.max(meta.messageCount, count);
    await this.conversations.save(owner, meta);
  }

  /** The first seq where the log differs from `messages` (compared as far as both go), or null. */
  private async firstDifference(
    owner: Owner,
    sessionId: string,
    messages: LegacyMessage[],
    stored: number,
  ): Promise<number | null> {
    const upTo = Math.min(stored, messages.length);
    for (let afterSeq = 0; afterSeq < upTo;) {
      const page = await this.conversations.messages(owner, sessionId, {
        afterSeq,
        limit: Math.min(200, upTo - afterSeq),
      });
      if (page.length === 0) return afterSeq + 1;
      for (const m of page) {
        const want = messages[m.seq - 1];
        if (m.seq !== afterSeq + 1 || !want || want.role !== m.role || want.content !== m.content)
          return afterSeq + 1;
        afterSeq = m.seq;
      }
    }
    return null;
  }
}
