import {
  ConversationRepository,
  ExecutionStatus,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { TaskRecovery } from '../src/recovery/task-recovery.service';
import { TaskLeases } from '../src/turn/task-run';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

const LEASE_MS = 30_000;
const SKEW_MS = 5 * 60_000;

/**
 * Task leases between replicas whose clocks disagree: the lease a live worker wrote must read
 * as live on a replica whose clock runs minutes ahead, and a lease taken on a replica whose
 * clock runs behind must not read as run out on the others.
 */
describe('task leases across skewed clocks (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;
  const owner: Owner = { tenantId: 'acme', userId: 'alice' };
  const realNow = Date.now;

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('leaseclock', {
      env: {
        LOG_LEVEL: 'error',
        TASK_LEASE_MS: String(LEASE_MS),
        AGENT_TIMEOUT_MS: '1000',
        AGENT_MAX_EXECUTION_MS: '2000',
        RECOVERY_INTERVAL_MS: String(24 * 3600 * 1000),
      },
    });
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(() => orch?.close());

  it('a replica whose clock runs ahead leaves a live worker its task', async () => {
    const { meta } = await orch.get(ConversationRepository).create(owner);
    const turn = await storeAcceptedTurn(orch, owner, meta.conversationId, {
      taskId: 't_skewahead0001',
      question: 'is my lease still live?',
      key: 'skew-ahead-key',
    });
    // Another replica is working on it, its lease renewed just now on a correct clock.
    const task = taskFixture(turn, 'labor-law', {
      status: TaskStatus.RUNNING,
      executions: [
        executionFixture('a_skewahead0001', 'labor-law', { status: ExecutionStatus.RUNNING }),
      ],
      lease: {
        owner: 'orchestrator-live',
        expiresAt: new Date(realNow() + LEASE_MS).toISOString(),
      },
    });
    await orch.get(TaskRepository).create(owner, task);
    await orch.get(SystemRepository).saveRun({
      taskId: turn.taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: meta.conversationId,
      owner: 'orchestrator-live',
      lockToken: null,
      createdAt: new Date().toISOString(),
    });

    // This replica's clock runs five minutes ahead.
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + SKEW_MS);
    // How many tasks the scan found due (not waiting for the recoveries it started to end).
    const { due } = await orch.get(TaskRecovery).start();
    expect(due).toBe(0);
  });

  it('a lease taken on a clock that runs behind is not over for the others', async () => {
    const leases = orch.get(TaskLeases);
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() - SKEW_MS);
    const end = leases.leaseEnd();
    jest.restoreAllMocks();
    expect(end).toBeGreaterThan(realNow() + LEASE_MS / 2);
  });
});
