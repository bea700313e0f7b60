import { Injectable } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import {
  ConversationRepository,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { TaskLeases } from './task-run';

/**
 * A holder found live, or one no task names (a turn not yet indexed, a delete), is asked about
 * again after this at most: its lease may be cut short (a stopping holder caps it).
 */
export const RECHECK_MS = 2000;

/**
 * Whether a conversation lock's holder is a worker that stopped (killed, or paused past its
 * lease): the token is the one the run index records for a RUNNING task of the conversation,
 * and that task's lease has run out, as MySQL holds it. The rule the recovery scan takes a lock
 * over by, so a turn waiting for the lock may take it over too instead of waiting out its TTL.
 * A holder that renews its lease, or one that cannot be named, is waited for here (the lock
 * itself takes over from a holder whose process is gone: LockHolderLiveness).
 *
 * Waiting turns ask every half second; a holder found live, or one no task names, is asked about
 * again by this process only after 2 s (or at the end of its lease, if sooner), so a busy
 * conversation's waiters do not each keep reading MySQL.
 */
@Injectable()
export class StaleLockHolder {
  constructor(
    private readonly conversations: ConversationRepository,
    private readonly tasks: TaskRepository,
    private readonly system: SystemRepository,
    private readonly leases: TaskLeases,
  ) {}

  /** Tokens known not to be stale: until when (epoch ms), after which they may have become so. */
  private readonly live = new LRUCache<string, number>({ max: 10_000 });

  /** The task of the stopped worker holding `token`, or null. */
  async taskOf(owner: Owner, conversationId: string, token: string): Promise<string | null> {
    if ((this.live.get(token) ?? 0) > Date.now()) return null;
    const meta = await this.conversations.find(owner, conversationId, true);
    for (const taskId of meta?.activeTaskIds ?? []) {
      const entry = await this.system.run(taskId);
      if (entry?.lockToken !== token || entry.conversationId !== conversationId) continue;
      // Read after the entry: a resumer renews the lease before its index entry names its token.
      const task = await this.tasks.get(owner, conversationId, taskId, true);
      if (task?.status !== TaskStatus.RUNNING) continue;
      if (this.leases.expired(task)) return taskId;
      // Until its lease ends, or sooner: a stopping holder shortens its lease (capLeases).
      const leaseLeft = Date.parse(task.lease!.expiresAt) - this.leases.now();
      this.live.set(token, Date.now() + Math.min(leaseLeft, RECHECK_MS));
      return null;
    }
    this.live.set(token, Date.now() + RECHECK_MS);
    return null;
  }
}
