import {
  ConversationRepository,
  LoomError,
  LoomErrorCode,
  Owner,
  TaskSession,
} from '@loom/session';

/** A key's turn that did not finish, and whose message is no longer the conversation's newest. */
export const conversationWentOn = (): LoomError =>
  new LoomError(
    LoomErrorCode.CONFLICT,
    'this turn failed and the conversation has gone on since: send the message again under a new Idempotency-Key',
  );

/**
 * Whether a message follows the task's user message, read from MySQL (`refresh` first): a reply
 * of a task that has none would then land after later turns, out of order.
 */
export async function wentOnSince(
  conversations: ConversationRepository,
  owner: Owner,
  task: TaskSession,
): Promise<boolean> {
  const [later] = await conversations.messages(owner, task.conversationId, {
    afterSeq: task.userSeq,
    limit: 1,
  });
  return later !== undefined;
}
