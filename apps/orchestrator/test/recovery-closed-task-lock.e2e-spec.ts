import {
  ConversationLock,
  ConversationRepository,
  ExecutionStatus,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { TaskRecovery } from '../src/recovery/task-recovery.service';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

const LEASE_MS = 1000;

/**
 * One lock acquisition can carry two tasks: a turn resumes an interrupted task, then starts its
 * own under the same token. When the first one's clean-up fails, its run-index entry stays,
 * naming that token. Once that closed task is past its grace, a scan must not take the lock from
 * the live process still holding it for the second task (whose next fenced write would fail): it
 * leaves the entry until the lock is free or its holder is gone, then tidies it.
 */
describe('recovery of a closed task whose lock token a live turn still holds (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;
  const owner: Owner = { tenantId: 'acme', userId: 'alice' };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('closedlock', {
      env: {
        LOG_LEVEL: 'error',
        TASK_LEASE_MS: String(LEASE_MS),
        RECOVERY_INTERVAL_MS: '3600000', // the test runs the scans itself
      },
    });
  });
  afterAll(() => orch?.close());

  it('leaves the lock to its live holder, and tidies the task once the lock is free', async () => {
    const conversations = orch.get(ConversationRepository);
    const system = orch.get(SystemRepository);
    const recovery = orch.get(TaskRecovery);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const taskId = 't_closedlocktask1';
    const turn = await storeAcceptedTurn(orch, owner, id, {
      taskId,
      question: 'Is my non-compete clause valid?',
      key: 'key-closed',
    });
    // This process holds the conversation, as the turn that resumed the task and went on.
    const lock = await orch.get(ConversationLock).acquire({ tenantId: owner.tenantId }, id);
    const longAgo = new Date(Date.now() - 10 * LEASE_MS).toISOString();
    const task = taskFixture(turn, 'labor-law', {
      status: TaskStatus.COMPLETED,
      completedAt: longAgo,
      replySeq: 2,
      executions: [
        executionFixture('a_closedlockexec1', 'labor-law', {
          status: ExecutionStatus.COMPLETED,
          completedAt: longAgo,
          output: 'It holds for two years at most.',
        }),
      ],
    });
    await orch.get(TaskRepository).create(owner, task);
    await system.saveRun({
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: id,
      owner: 'this-process',
      lockToken: lock.token,
      createdAt: longAgo,
    });
    const indexed = async () => (await system.runs(100)).some((e) => e.taskId === taskId);

    const whileHeld = await recovery.scan();
    // The holder's fence still admits its writes: nobody took the lock over.
    const current = await conversations.get(owner, id, true);
    await expect(conversations.save(owner, current, lock.fence)).resolves.not.toThrow();
    expect(whileHeld).toMatchObject({ due: 1, recovered: 0 });
    expect(await indexed()).toBe(true);

    await lock.release();
    const afterRelease = await recovery.scan();
    expect(afterRelease).toMatchObject({ due: 1, recovered: 1 });
    expect(await indexed()).toBe(false);
  });
});
