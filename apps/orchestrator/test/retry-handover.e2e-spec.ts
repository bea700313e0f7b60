import request from 'supertest';
import {
  ConversationRepository,
  ExecutionStatus,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { TaskLeases } from '../src/turn/task-run';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

/**
 * A same-key retry of a turn that failed 503 reaches a replica that starts handing its runs over
 * (SIGTERM) while the retry writes the task back into the conversation's active tasks: the task
 * must not be left RUNNING outside the run index, where no recovery scan finds it.
 */
describe('a retry of a failed turn meeting a hand-over (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('retryho');
  });
  afterAll(() => orch?.close());

  it('answers 503 and leaves the task FAILED, not RUNNING and unindexed', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const conversations = orch.get(ConversationRepository);
    const tasks = orch.get(TaskRepository);
    const system = orch.get(SystemRepository);
    const leases = orch.get(TaskLeases);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const question = 'Is my non-compete clause valid?';
    const taskId = 't_retryhandover01';
    const turn = await storeAcceptedTurn(orch, owner, id, { taskId, question, key: 'key-1' });
    const failed = taskFixture(turn, 'ghost-law', {
      status: TaskStatus.FAILED,
      executions: [
        executionFixture('a_retryhandover01', 'ghost-law', {
          status: ExecutionStatus.FAILED,
          completedAt: new Date().toISOString(),
          error: { code: 'TIMEOUT', message: 'ghost-law did not answer in time' },
        }),
      ],
      completedAt: new Date().toISOString(),
      error: { code: 'TIMEOUT', message: 'required agent ghost-law failed: no answer in time' },
    });
    await tasks.create(owner, failed);
    await conversations.save(owner, { ...meta, messageCount: 1 });

    // SIGTERM lands while the retry puts the task back into the conversation's active tasks.
    const save = conversations.save.bind(conversations);
    const spy = jest
      .spyOn(conversations, 'save')
      .mockImplementationOnce(async (...args: Parameters<typeof save>) => {
        await save(...args);
        await leases.handOverAll();
      });
    const res = await request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', orch.auth('alice', 'acme'))
      .set('idempotency-key', 'key-1')
      .send({ content: question });
    spy.mockRestore();
    expect([res.status, res.body.code]).toEqual([503, 'UNAVAILABLE']);
    const task = await tasks.get(owner, id, taskId, true);
    // FAILED, in the active tasks: the next turn or a retry tidies it (or retries it) under the
    // lock, and so does the scan, which finds it in the run index (written before the task could
    // be RUNNING again, which would need the index for the scan to find it).
    expect({
      status: task?.status,
      indexed: (await system.run(taskId)) !== null,
      active: (await conversations.get(owner, id, true)).activeTaskIds,
    }).toEqual({ status: TaskStatus.FAILED, indexed: true, active: [taskId] });
  });
});
