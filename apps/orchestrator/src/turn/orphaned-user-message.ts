import { Injectable } from '@nestjs/common';
import {
  ConversationMessage,
  ConversationRepository,
  IdempotencyEntry,
  Owner,
} from '@loom/session';
import { conversationWentOn } from './conversation-went-on';

/**
 * The user message of a keyed turn that stopped after storing it and before writing its task
 * (MySQL failed, or the process died, between the two). The key's entry is written first and
 * names the seq the message takes, so its retry looks there: a message of its task, still the
 * newest, is adopted (the turn goes on from it, nothing appended again); once a later message is
 * in the conversation the key answers 409, as for a failed task (its reply would land after the
 * later turns); no message of its task there means it was never stored, and the turn starts over.
 */
@Injectable()
export class OrphanedUserMessage {
  constructor(private readonly conversations: ConversationRepository) {}

  /** The message to adopt, or null when it was never stored; CONFLICT once a later one came. */
  async find(
    owner: Owner,
    conversationId: string,
    entry: IdempotencyEntry,
  ): Promise<ConversationMessage | null> {
    // What a killed process committed to MySQL but not to Redis (the message) must be seen.
    await this.conversations.refresh(conversationId);
    const newest = await this.conversations.messageCount(owner, conversationId, true);
    // An entry of an earlier version was written after its message: only the newest can be it.
    const seq = entry.userSeq ?? newest;
    if (seq < 1 || seq > newest) return null;
    const [message] = await this.conversations.messages(owner, conversationId, {
      afterSeq: seq - 1,
      limit: 1,
    });
    if (message?.seq !== seq || message.role !== 'user' || message.taskId !== entry.taskId)
      return null;
    if (seq < newest) throw conversationWentOn();
    return message;
  }
}
