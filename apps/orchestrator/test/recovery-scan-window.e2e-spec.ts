import { ConversationRepository, Owner, SystemRepository } from '@loom/session';
import { TaskRecovery } from '../src/recovery/task-recovery.service';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * A scan reads a bounded window of the run index (10,000 entries). When more entries than that
 * are indexed, and the first window's are all live (long turns of a busy deployment), the due
 * entries after it must still be reached by the next scans, not left behind for good.
 */
describe('recovery scan of a run index longer than one scan reads (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;
  const owner: Owner = { tenantId: 'acme', userId: 'alice' };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('scanwin', {
      // No scan of its own: the test runs them.
      env: { LOG_LEVEL: 'error', RECOVERY_INTERVAL_MS: String(24 * 3600 * 1000) },
    });
  });
  afterAll(() => orch?.close());

  it('reaches every entry within a few scans, whatever the window', async () => {
    const recovery = orch.get(TaskRecovery);
    recovery.scanLimit = 2;
    const system = orch.get(SystemRepository);
    const { meta } = await orch.get(ConversationRepository).create(owner);
    const entry = (taskId: string, createdAt: Date) => ({
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: meta.conversationId,
      owner: 'orchestrator-elsewhere',
      lockToken: null,
      createdAt: createdAt.toISOString(),
    });
    // Two entries first in the index's order whose tasks are just starting (not due for a
    // lease's time), then one left behind by a worker that died an hour ago (its task gone).
    await system.saveRun(entry('t_window0000001', new Date()));
    await system.saveRun(entry('t_window0000002', new Date()));
    await system.saveRun(entry('t_window0000003', new Date(Date.now() - 3600_000)));

    const reports = [];
    for (let i = 0; i < 3 && (await system.run('t_window0000003')); i++)
      reports.push(await recovery.scan());
    expect(await system.run('t_window0000003')).toBeNull();
    expect(reports.reduce((n, r) => n + r.recovered, 0)).toBe(1);
    // The live entries stay indexed.
    expect(await system.run('t_window0000001')).not.toBeNull();
    expect(await system.run('t_window0000002')).not.toBeNull();
  });
});
