import { Logger } from '@nestjs/common';
import { LockHandle, TaskRepository, TaskSession } from '@loom/session';
import { TaskRun } from './task-run';

/** A TaskRun over a repository that records every saved lease, and a lock that counts releases. */
function fixture(leaseCap = Infinity) {
  const saved: Array<{ expiresAt: number } | null> = [];
  const tasks = {
    save: async (_owner: unknown, task: TaskSession) => {
      saved.push(task.lease ? { expiresAt: Date.parse(task.lease.expiresAt) } : null);
    },
  } as unknown as TaskRepository;
  const lock = { token: 't', fence: 1, release: jest.fn(async () => undefined) };
  const task = { taskId: 't_1', lease: null } as unknown as TaskSession;
  const run = new TaskRun({ tenantId: 'x', userId: 'y' }, task, lock as unknown as LockHandle, {
    tasks,
    renewEveryMs: 1000,
    instanceId: 'orchestrator-1',
    log: new Logger('test'),
    leaseEnd: () => Math.min(Date.now() + 600_000, leaseCap),
    now: () => Date.now(),
    onStop: () => undefined,
  });
  return { run, saved, lock };
}

describe('TaskRun hand-over', () => {
  it('caps the lease at the shutdown deadline', async () => {
    const cap = Date.now() + 5000;
    const { run, saved } = fixture(cap);
    await run.checkpoint();
    expect(saved).toEqual([{ expiresAt: cap }]);
  });

  it('ends the lease, releases the lock, fails the work UNAVAILABLE and refuses later writes', async () => {
    const { run, saved, lock } = fixture();
    const work = run.guard(new Promise(() => undefined));
    const before = Date.now();
    expect(await run.handOver()).toBe(true);
    await expect(work).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(saved).toHaveLength(1);
    expect(saved[0]!.expiresAt).toBeGreaterThanOrEqual(before);
    expect(saved[0]!.expiresAt).toBeLessThanOrEqual(Date.now());
    expect(lock.release).toHaveBeenCalledTimes(1);
    // The next wave's checkpoint is refused: nothing more is dispatched or written.
    await expect(run.checkpoint()).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    expect(saved).toHaveLength(1);
  });

  it('leaves a run whose agents are done to finish', async () => {
    const { run, saved, lock } = fixture();
    await run.guard(Promise.resolve('done'));
    expect(await run.handOver()).toBe(false);
    expect(lock.release).not.toHaveBeenCalled();
    await run.close();
    expect(saved).toEqual([null]);
  });
});
