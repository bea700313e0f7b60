import request from 'supertest';
import {
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
 * A same-key retry of a turn that failed 503 reopens its task: once the task is written RUNNING
 * (leased), its process dies before anything else is written. Nobody may have to come back for
 * it: the recovery scan finds it through the run index once its lease has run out, and ends it.
 */
describe('a retry that dies once its task is RUNNING again (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('retrycrash', {
      env: {
        AGENT_TIMEOUT_MS: '1000',
        AGENT_MAX_EXECUTION_MS: '1000',
        TASK_LEASE_MS: '1000',
        RECOVERY_INTERVAL_MS: '3600000', // the test runs the scan itself
      },
    });
  });
  afterAll(() => orch?.close());

  it('leaves the task in the run index, and the scan ends it', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const system = orch.get(SystemRepository);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Can my employer cut my pay?';
    const taskId = 't_retrycrash00001';
    const turn = await storeAcceptedTurn(orch, owner, id, { taskId, question, key: 'key-1' });
    // Its first attempt failed 503 and was cleaned up: out of the active tasks and the index.
    await tasks.create(
      owner,
      taskFixture(turn, 'ghost-law', {
        status: TaskStatus.FAILED,
        completedAt: new Date().toISOString(),
        error: { code: 'TIMEOUT', message: 'required agent ghost-law failed: no answer' },
        executions: [
          executionFixture('a_retrycrash00001', 'ghost-law', {
            status: ExecutionStatus.FAILED,
            completedAt: new Date().toISOString(),
            error: { code: 'TIMEOUT', message: 'no answer' },
          }),
        ],
      }),
    );
    await conversations.save(owner, { ...meta, messageCount: 1 });

    // The process dies at the first index write made once the task is RUNNING again: nothing
    // is written from there on (the exception stands for the kill).
    const saveRun = system.saveRun.bind(system);
    let died = false;
    const spy = jest.spyOn(system, 'saveRun').mockImplementation(async (entry: RunEntry) => {
      const stored = await tasks.get(owner, id, taskId, true);
      if (!died && entry.taskId === taskId && stored?.status === TaskStatus.RUNNING) {
        died = true;
        throw new Error('killed');
      }
      return saveRun(entry);
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

    // Once its lease has run out, the scan finds it and ends it (ghost-law still answers nobody).
    await new Promise((r) => setTimeout(r, 1100));
    const report = await orch.get(TaskRecovery).scan();
    const ended = await tasks.get(owner, id, taskId, true);
    console.log(`retry died after RUNNING: scan ${JSON.stringify(report)}, ${ended?.status}`);
    expect(report).toMatchObject({ due: 1, recovered: 1 });
    expect(ended).toMatchObject({ status: TaskStatus.FAILED, error: { code: 'TIMEOUT' } });
    expect((await conversations.get(owner, id, true)).activeTaskIds).toEqual([]);
    expect(await system.run(taskId)).toBeNull();
  });
});
