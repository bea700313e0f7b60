import { LoomEnv } from '@loom/agent-kit';
import { SessionOptions, SharedClock, TaskRepository, TaskSession } from '@loom/session';
import { TaskLeases } from './task-run';
import { TurnService } from './turn.service';

/**
 * A turn that creates its task after SIGTERM capped the leases (it was planning, or waiting for
 * its lock) must not write a lease of TASK_LEASE_MS: killed before its first renewal, it would
 * leave a task nobody recovers for 10 minutes (docs/recovery.md, "Stopping a process").
 */
describe('a task created after the shutdown capped the leases', () => {
  it('is created with the capped lease', async () => {
    const leases = new TaskLeases(
      { TASK_LEASE_MS: 600_000 } as LoomEnv,
      'orchestrator-1',
      { lockTtlMs: 30_000 } as SessionOptions,
      {} as TaskRepository,
      new SharedClock(null),
    );
    const cap = Date.now() + 3500;
    await leases.capLeases(cap);
    const plan = { intent: 'labor-law', taskType: 'consultation', steps: [] };
    const task: TaskSession = (TurnService.prototype as any).newTask.call(
      { leases },
      { tenantId: 'tn', userId: 'us' },
      't_0123456789',
      'c_0123456789',
      'hi',
      plan,
      1,
    );
    expect(Date.parse(task.lease!.expiresAt)).toBeLessThanOrEqual(cap);
  });
});
