import Redis from 'ioredis';
import { FakeOpenAiServer, ReceivedCompletion, TEST_REDIS_URL } from '@loom/testing';
import {
  SUMMARY_INSTRUCTION,
  TITLE_INSTRUCTION,
} from '../apps/orchestrator/src/turn/history-prompts';
import { client, RunningSystem } from './system';
import { contiguous, logLines, runIndexSize, storedMessages, waitFor } from './faults.support';
import { orchestratorOn, startReplicas } from './handover.support';
import { startOrchestrator, storedTasks } from './rolling.support';
const { freePort } = require('../scripts/lib/processes');

const CONTENT = '我跟公司签的劳动合同有问题';
const FOLLOW_UP = '上面那份合同里关于竞业协议的部分怎么看?';
const ROUTE_PROMPT = 'You route a legal consultation';
type Purpose = 'plan' | 'title' | 'summary';

function purposeOf(req: ReceivedCompletion): Purpose | 'answer' {
  const system = req.messages[0]?.content ?? '';
  if (system.startsWith(ROUTE_PROMPT)) return 'plan';
  if (system.startsWith(TITLE_INSTRUCTION)) return 'title';
  if (system.startsWith(SUMMARY_INSTRUCTION)) return 'summary';
  return 'answer';
}

/**
 * An orchestrator killed (SIGKILL) holding a conversation lock that no RUNNING task with an
 * expired lease names: while it plans the turn (no task yet), while it names the conversation
 * (its task RUNNING, the lease far from over: TASK_LEASE_MS is the default 10 min) and while it
 * summarizes (its task COMPLETED). The lock would live on for its 30 s TTL, past the next turn's
 * 10 s wait (409). The next turn, on another replica, finds the holder's liveness key lapsed and
 * takes the lock over: 201, the history whole, nothing twice. Replica 0 asks an OpenAI-compatible
 * model (the test's, which stops answering where the test says); replica 1 the offline one.
 */
describe('system: a turn takes over the lock of a killed holder, whatever it was doing', () => {
  let sys: RunningSystem;
  let ports: number[];
  let model: FakeOpenAiServer;
  let redis: Redis;
  let hangAt: Purpose | null = null;

  beforeAll(async () => {
    model = await FakeOpenAiServer.start((req) => {
      const purpose = purposeOf(req);
      if (purpose === hangAt) return { delayMs: 120_000, text: 'never sent' };
      if (purpose === 'plan') return { text: '{"intent": "labor-law", "agents": ["labor-law"]}' };
      return { text: purpose === 'title' ? '劳动合同' : `a ${purpose}` };
    });
    const openai = {
      LLM_PROVIDER: 'openai',
      OPENAI_BASE_URL: model.baseUrl,
      OPENAI_API_KEY: 'sk-lock-holder-test',
      LLM_MODEL: 'fake-model',
    };
    ({ sys, ports } = await startReplicas({
      replicas: 1,
      env: {},
      appEnv: { orchestrator: openai },
    }));
    ports.push(await freePort());
    await startOrchestrator(sys, ports[1], { LLM_PROVIDER: 'offline' });
    redis = new Redis(TEST_REDIS_URL);
  });
  afterAll(async () => {
    redis?.disconnect();
    await sys?.stop();
    await model?.close();
  });

  type Answer = { status: number | string; body?: any; ms: number };
  function post(port: number, tenant: string, id: string, content: string, key?: string) {
    const api = client(`http://127.0.0.1:${port}`, sys.token(tenant, 'alice'));
    const headers: Record<string, string> = key ? { 'idempotency-key': key } : {};
    const started = Date.now();
    return api('POST', `/v1/conversations/${id}/messages`, { content }, headers).then(
      (r): Answer => ({ status: r.status, body: r.body, ms: Date.now() - started }),
      (err): Answer => ({ status: err.cause?.code ?? err.name, ms: Date.now() - started }),
    );
  }

  /**
   * Sends a turn through replica 0 and kills replica 0 once the model is asked for `purpose` on
   * it: `before` then tells what had been stored. Replica 0 is started again afterwards.
   */
  async function killedWhile(
    purpose: Purpose,
    turn: { tenant: string; id: string; content: string; key: string },
  ) {
    const asked = model.received.filter((r) => purposeOf(r) === purpose).length;
    hangAt = purpose;
    const first = post(ports[0], turn.tenant, turn.id, turn.content, turn.key);
    await waitFor(() => model.received.filter((r) => purposeOf(r) === purpose).length > asked, {
      what: `replica 0 asking for the ${purpose}`,
      intervalMs: 10,
      timeoutMs: 30_000,
    });
    const lock = await redis.get(`${sys.env.LOOM_KEY_PREFIX}s:{${turn.id}}:lock`);
    const before = {
      lockHeld: lock !== null,
      messages: (await storedMessages(sys.env.MYSQL_URL, turn.id)).map((m) => m.role),
      tasks: (await storedTasks(sys.env.MYSQL_URL))
        .filter((t) => t.conversationId === turn.id)
        .map((t) => t.status),
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
    };
    await sys.kill(orchestratorOn(sys, ports[0]), 'SIGKILL');
    hangAt = null;
    return { before, first: await first };
  }

  async function after(tenant: string, id: string) {
    const stored = await storedMessages(sys.env.MYSQL_URL, id);
    return {
      stored: stored.map((m) => [m.seq, m.role, m.taskId]),
      contiguous: contiguous(stored),
      runIndex: await runIndexSize(sys.env.MYSQL_URL),
      takenOver: logLines(sys, 'orchestrator', 'took over the lock of a stopped process', {
        conversationId: id,
      }).length,
    };
  }

  /**
   * After a turn killed past its reply (`turn`): the next turn, then that turn's retry, both on
   * replica 1. Both are answered, the retry with the stored reply, and the killed turn's step ran
   * once.
   */
  async function nextTurnThenRetry(
    doing: string,
    turn: { tenant: string; id: string; content: string; key: string },
  ): Promise<void> {
    const next = await post(ports[1], turn.tenant, turn.id, FOLLOW_UP);
    const retry = await post(ports[1], turn.tenant, turn.id, turn.content, turn.key);
    const c = await after(turn.tenant, turn.id);
    console.log(`killed while ${doing}: next turn ${next.status} in ${next.ms} ms`);
    expect([next.status, next.body?.userMessage?.seq, next.body?.reply?.seq]).toEqual([201, 3, 4]);
    expect([retry.status, retry.body?.reply?.seq]).toEqual([201, 2]);
    const t1 = retry.body.taskId;
    expect(c).toEqual(twoTurnsStored(t1, next.body.taskId));
    expect(logLines(sys, 'labor-law-agent', 'executing', { taskId: t1 })).toHaveLength(1);
  }

  /** What `after` finds once two turns were each stored once, in order, the lock taken over once. */
  function twoTurnsStored(t1: string, t2: string) {
    return {
      stored: [
        [1, 'user', t1],
        [2, 'assistant', t1],
        [3, 'user', t2],
        [4, 'assistant', t2],
      ],
      contiguous: true,
      runIndex: 0,
      takenOver: 1,
    };
  }

  async function conversation(tenant: string): Promise<string> {
    const api = client(`http://127.0.0.1:${ports[1]}`, sys.token(tenant, 'alice'));
    return (await api('POST', '/v1/conversations', {})).body.conversationId;
  }

  it('killed while planning (the lock held, no task yet): the retry is answered, after the history', async () => {
    const tenant = 'tenant-g1';
    const id = await conversation(tenant);
    const earlier = await post(ports[1], tenant, id, CONTENT);
    expect(earlier.status).toBe(201);
    try {
      const { before, first } = await killedWhile('plan', {
        tenant,
        id,
        content: FOLLOW_UP,
        key: 'g1',
      });
      expect(before).toEqual({
        lockHeld: true,
        messages: ['user', 'assistant'],
        tasks: ['COMPLETED'],
        runIndex: 0,
      });
      expect(first.status).not.toBe(201);
      const retry = await post(ports[1], tenant, id, FOLLOW_UP, 'g1');
      const c = await after(tenant, id);
      console.log(`killed while planning: retry ${retry.status} in ${retry.ms} ms`);
      expect([retry.status, retry.body?.userMessage?.seq, retry.body?.reply?.seq]).toEqual([
        201, 3, 4,
      ]);
      expect(c).toEqual(twoTurnsStored(earlier.body.taskId, retry.body.taskId));
    } finally {
      await startOrchestrator(sys, ports[0]);
    }
  });

  it('killed while naming the conversation (its task RUNNING, leased): the next turn finishes it first', async () => {
    const tenant = 'tenant-g2';
    const id = await conversation(tenant);
    const turn = { tenant, id, content: CONTENT, key: 'g2' };
    try {
      const { before } = await killedWhile('title', turn);
      expect(before).toEqual({
        lockHeld: true,
        messages: ['user', 'assistant'],
        tasks: ['RUNNING'],
        runIndex: 1,
      });
      await nextTurnThenRetry('naming', turn);
      const api = client(`http://127.0.0.1:${ports[1]}`, sys.token(tenant, 'alice'));
      expect((await api('GET', `/v1/conversations/${id}`)).body.title).not.toBeNull();
    } finally {
      await startOrchestrator(sys, ports[0]);
    }
  });

  it('killed while summarizing (its task COMPLETED): the next turn goes on at once', async () => {
    const tenant = 'tenant-g3';
    const id = await conversation(tenant);
    // Longer than the agents' history window: the turn's end folds it into a summary.
    const long = `${CONTENT} ${Array.from({ length: 2500 }, (_, i) => `clause${i}`).join(' ')}`;
    const turn = { tenant, id, content: long, key: 'g3' };
    try {
      const { before } = await killedWhile('summary', turn);
      expect(before).toEqual({
        lockHeld: true,
        messages: ['user', 'assistant'],
        tasks: ['COMPLETED'],
        runIndex: 0,
      });
      await nextTurnThenRetry('summarizing', turn);
    } finally {
      await startOrchestrator(sys, ports[0]);
    }
  });
});
