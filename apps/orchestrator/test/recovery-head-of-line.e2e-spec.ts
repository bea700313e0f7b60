import {
  ConversationRepository,
  ExecutionStatus,
  Owner,
  SystemRepository,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { ORCHESTRATOR_ID } from '../src/turn/task-run';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

const LEASE_MS = 1000;
const SCAN_MS = 250;
/** How long the first task's step waits for its agent, which no instance runs. */
const AGENT_WAIT_MS = 8000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One orchestrator replica, two tasks interrupted one after the other. The first one's recovery
 * waits a long time for its agent (a slow specialist, or one with no instance running). The
 * second one's worker dies while that recovery is under way: it must still be recovered within
 * its lease + the scan interval + 2 s (README "Recovery"), not once the first one's agent is done.
 */
describe('recovery of a task while another recovery waits for its agent (in-process, real stores)', () => {
  let orch: InProcessOrchestrator;
  const owner: Owner = { tenantId: 'acme', userId: 'alice' };

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('hol', {
      env: {
        LOG_LEVEL: 'error',
        TASK_LEASE_MS: String(LEASE_MS),
        RECOVERY_INTERVAL_MS: String(SCAN_MS),
        AGENT_TIMEOUT_MS: String(AGENT_WAIT_MS),
        AGENT_MAX_EXECUTION_MS: String(AGENT_WAIT_MS),
      },
    });
  });
  afterAll(() => orch?.close());

  /** A turn whose worker died with its one step `status`; its lease ends `leaseLeftMs` from now. */
  async function interruptedTurn(n: number, status: ExecutionStatus, leaseLeftMs: number) {
    const conversations = orch.get(ConversationRepository);
    const { meta } = await conversations.create(owner);
    const id = meta.conversationId;
    const taskId = `t_headofline000${n}`;
    const turn = await storeAcceptedTurn(orch, owner, id, {
      taskId,
      question: `Is clause ${n} of my contract valid?`,
      key: `key-${n}`,
    });
    await orch.get(SystemRepository).saveRun({
      taskId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      conversationId: id,
      owner: 'orchestrator-dead',
      lockToken: null,
      createdAt: new Date().toISOString(),
    });
    const done = status === ExecutionStatus.COMPLETED;
    const task = taskFixture(turn, 'ghost-law', {
      status: TaskStatus.RUNNING,
      executions: [
        executionFixture(`a_headofline000${n}`, 'ghost-law', {
          status,
          ...(done ? { completedAt: new Date().toISOString(), output: `Clause ${n} holds.` } : {}),
        }),
      ],
      lease: {
        owner: 'orchestrator-dead',
        expiresAt: new Date(Date.now() + leaseLeftMs).toISOString(),
      },
    });
    await orch.get(TaskRepository).create(owner, task);
    await conversations.save(owner, { ...meta, activeTaskIds: [taskId] });
    return { id, taskId };
  }

  const taskOf = (t: { id: string; taskId: string }) =>
    orch.get(TaskRepository).get(owner, t.id, t.taskId, true);

  it('is not held up by the first recovery', async () => {
    const self = orch.get<string>(ORCHESTRATOR_ID);
    // The first: its step's agent never answers; recovery waits AGENT_WAIT_MS for it.
    const slow = await interruptedTurn(1, ExecutionStatus.RUNNING, -1000);
    const until = Date.now() + 5000;
    while ((await taskOf(slow))?.lease?.owner !== self) {
      if (Date.now() > until) throw new Error('the first task was never resumed');
      await sleep(50);
    }
    // The second: its agent had answered; its worker died, its lease runs out in LEASE_MS.
    const quick = await interruptedTurn(2, ExecutionStatus.COMPLETED, LEASE_MS);
    const due = Date.now() + LEASE_MS;
    while ((await taskOf(quick))?.status === TaskStatus.RUNNING) {
      if (Date.now() > due + 3 * AGENT_WAIT_MS) break;
      await sleep(50);
    }
    const recoveredAfterDueMs = Date.now() - due;
    console.log(`the second task was recovered ${recoveredAfterDueMs} ms after its lease ended`);

    expect(await taskOf(quick)).toMatchObject({ status: TaskStatus.COMPLETED, replySeq: 2 });
    expect(recoveredAfterDueMs).toBeLessThan(SCAN_MS + 2000);
    // The first one's recovery was still waiting for its agent all along.
    expect((await taskOf(slow))?.status).toBe(TaskStatus.RUNNING);
  });
});
