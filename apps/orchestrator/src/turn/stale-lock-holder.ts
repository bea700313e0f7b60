import { Injectable } from '@nestjs/common';
import {
  ConversationRepository,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { TaskLeases } from './task-run';

/**
 * Whether a conversation lock's holder is a worker that stopped (killed, or paused past its
 * lease): the token is the one the run index records for a RUNNING task of the conversation,
 * and that task's lease has run out, as MySQL holds it. The rule the recovery scan takes a lock
 * over by, so a turn waiting for the lock may take it over too instead of waiting out its TTL.
 * A holder that renews its lease, or one that cannot be named, is waited for.
 */
@Injectable()
export class StaleLockHolder {
  constructor(
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly system: SystemRepository,
    private readonly leases: TaskLeases,
  ) {}

  /** The task of the stopped worker holding `token`, or null. */
  async taskOf(owner: Owner, conversationId: string, token: string): Promise<string | null> {
    const meta = await this.conversations.find(owner, conversationId, true);
    for (const taskId of meta?.activeTaskIds ?? []) {
      const entry = await this.system.run(taskId);
      if (entry?.lockToken !== token || entry.conversationId !== conversationId) continue;
      // Read after the entry: a resumer renews the lease before its index entry names its token.
      const task = await this.tasks.get(owner, conversationId, taskId, true);
      if (task?.status === TaskStatus.RUNNING && this.leases.expired(task)) return taskId;
    }
    return null;
  }
}
