import { Logger } from '@nestjs/common';
import { LoomEnv } from '@loom/agent-kit';
import {
  LockHandle,
  SessionInfra,
  SessionOptions,
  SharedClock,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { createTestSessionInfra } from '@loom/testing';
import { TaskLeases } from '../src/turn/task-run';

/**
 * SIGTERM with more turns open than the MySQL pool queues (1000): every lease is capped and
 * every run handed over, none refused with "Queue limit reached" (real MySQL and Redis).
 */
describe('a stopping orchestrator with many open turns', () => {
  let infra: SessionInfra;
  let cleanup: () => Promise<void>;
  const owner = { tenantId: 'acme', userId: 'alice' };
  const conversationId = 'c_manyturns00001';
  const n = 1_100;

  beforeAll(async () => {
    ({ infra, cleanup } = await createTestSessionInfra('loom_leasecap'));
    const rows = Array.from({ length: n }, (_, i) => {
      const task = {
        taskId: `t_many${String(i).padStart(8, '0')}`,
        conversationId,
        tenantId: owner.tenantId,
        userId: owner.userId,
        status: TaskStatus.RUNNING,
        lease: { owner: 'orchestrator-1', expiresAt: new Date(Date.now() + 600_000) },
      };
      return [conversationId, `task:${task.taskId}`, 0, owner.tenantId, JSON.stringify(task)];
    });
    await infra.dataSource!.query(
      'INSERT INTO loom_session_state (session_id, state_key, item_index, tenant_id, state_data) VALUES ?',
      [rows],
    );
  });
  afterAll(() => cleanup());

  const leasesOfTasks = async () => {
    const rows: Array<{ state_data: string }> = await infra.dataSource!.query(
      "SELECT state_data FROM loom_session_state WHERE session_id = ? AND state_key LIKE 'task:%'",
      [conversationId],
    );
    return rows.map((r) => Date.parse((JSON.parse(r.state_data) as TaskSession).lease!.expiresAt));
  };

  it('caps every lease, then hands every run over', async () => {
    const tasks = new TaskRepository(infra.store);
    const leases = new TaskLeases(
      { TASK_LEASE_MS: 600_000 } as LoomEnv,
      'orchestrator-1',
      { lockTtlMs: 30_000 } as SessionOptions,
      tasks,
      new SharedClock(null),
    );
    jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const lock: LockHandle = {
      sessionId: conversationId,
      token: 'token',
      fence: undefined as unknown as number, // unfenced writes: the lock is not what is tested
      release: async () => undefined,
      renew: async () => true,
    };
    const rows: Array<{ state_data: string }> = await infra.dataSource!.query(
      "SELECT state_data FROM loom_session_state WHERE session_id = ? AND state_key LIKE 'task:%'",
      [conversationId],
    );
    for (const r of rows) leases.open(owner, JSON.parse(r.state_data) as TaskSession, lock);
    expect(leases.running()).toHaveLength(n);

    const cap = Date.now() + 5_000;
    await leases.capLeases(cap);
    const capped = await leasesOfTasks();
    expect(capped).toHaveLength(n);
    expect(capped.filter((at) => at > cap)).toEqual([]);

    expect(await leases.handOverAll()).toBe(n);
    const ended = Date.now();
    expect((await leasesOfTasks()).filter((at) => at > ended)).toEqual([]);
    expect(leases.running()).toEqual([]);
  });
});
