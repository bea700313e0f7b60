import request from 'supertest';
import {
  ConversationLock,
  ConversationRepository,
  ExecutionStatus,
  RunEntry,
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

/**
 * The run index between two owners of one task. Owner A failed a turn with a 503 and, paused past
 * its conversation lock, had not yet cleaned up (removed the task from the run index). The
 * client's Idempotency-Key retry (owner B) took the lock, reopened the task and indexed it under
 * its own lock; B then died. A wakes and finishes its cleanup: that late removal must not unlist
 * B's run, or the recovery scan never finds the RUNNING task again.
 */
describe('run index: a stale owner does not unlist the run of the owner after it (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('runfence', {
      env: {
        AGENT_TIMEOUT_MS: '1000',
        AGENT_MAX_EXECUTION_MS: '1000',
        TASK_LEASE_MS: '1000',
        RECOVERY_INTERVAL_MS: '3600000', // the test runs the scan itself
      },
    });
  });
  afterAll(() => orch?.close());

  it("a late cleanup of the failed attempt leaves the retry's run indexed, and the scan ends it", async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const system = orch.get(SystemRepository);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Can my employer cut my pay?';
    const taskId = 't_runfence000001';
    const turn = await storeAcceptedTurn(orch, owner, id, { taskId, question, key: 'key-1' });

    // Owner A: ran the turn under its lock, failed it 503; its index entry is still there.
    const a = await orch.get(ConversationLock).acquire({ tenantId: owner.tenantId }, id);
    await tasks.create(
      owner,
      taskFixture(turn, 'ghost-law', {
        status: TaskStatus.FAILED,
        completedAt: new Date().toISOString(),
        error: { code: 'TIMEOUT', message: 'required agent ghost-law failed: no answer' },
        executions: [
          executionFixture('a_runfence000001', 'ghost-law', {
            status: ExecutionStatus.FAILED,
            completedAt: new Date().toISOString(),
            error: { code: 'TIMEOUT', message: 'no answer' },
          }),
        ],
      }),
      a.fence,
    );
    await conversations.save(owner, { ...meta, messageCount: 1 }, a.fence);
    await system.saveRun({
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: id,
      owner: 'orchestrator-a',
      lockToken: a.token,
      createdAt: new Date().toISOString(),
      fence: a.fence,
    } as RunEntry);
    // A pauses: its lock lapses (its Redis key goes; A still holds its handle and fence).
    await a.release();

    // Owner B: the retry reopens the task and indexes it under its own lock, then dies.
    const saveRun = system.saveRun.bind(system);
    let died = false;
    const spy = jest.spyOn(system, 'saveRun').mockImplementation(async (entry: RunEntry) => {
      await saveRun(entry);
      const stored = await tasks.get(owner, id, taskId, true);
      if (!died && entry.taskId === taskId && stored?.status === TaskStatus.RUNNING) {
        died = true;
        throw new Error('killed');
      }
    });
    try {
      await request(orch.app.getHttpServer())
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', orch.auth('alice', 'acme'))
        .set('idempotency-key', 'key-1')
        .send({ content: question });
    } finally {
      spy.mockRestore();
    }
    expect(died).toBe(true);
    expect((await tasks.get(owner, id, taskId, true))?.status).toBe(TaskStatus.RUNNING);
    expect((await system.run(taskId))?.lockToken).not.toBe(a.token);

    // A wakes and finishes the cleanup of its failed attempt, with its (stale) fence.
    await system.removeRun(taskId, a.fence);
    expect(await system.run(taskId)).not.toBeNull();

    // Once B's lease has run out, the scan finds the task and ends it.
    await new Promise((r) => setTimeout(r, 1100));
    const report = await orch.get(TaskRecovery).scan();
    expect(report).toMatchObject({ due: 1, recovered: 1 });
    expect(await tasks.get(owner, id, taskId, true)).toMatchObject({ status: TaskStatus.FAILED });
    expect(await system.run(taskId)).toBeNull();
  });
});
