import { FakeOpenAiServer, ReceivedCompletion } from '@loom/testing';
import { TITLE_INSTRUCTION } from '../apps/orchestrator/src/turn/history-prompts';
import { contiguous, logLines, storedMessages, WENT_ON_CONFLICT } from './faults.support';
import { client, RunningSystem, startSystem } from './system';

const ROUTE_PROMPT = 'You route a legal consultation';
const PLAN = { text: '{"intent": "labor-law", "agents": ["legal-research", "labor-law"]}' };
const ANSWER = ['依据劳动合同法，', '竞业限制最长两年。'];
const BUSY = 'the model endpoint is busy (rate limited or overloaded): retry later (HTTP 429)';

type Tokens = { promptTokens: number; completionTokens: number };

/** The model's answers: the plan, a title, and the specialist's answer (or what `answer` says). */
const model = (answer: () => Record<string, unknown> = () => ({ chunks: ANSWER })) => {
  return (req: ReceivedCompletion) => {
    const system = req.messages[0]?.content ?? '';
    if (system.startsWith(ROUTE_PROMPT)) return PLAN;
    if (system.startsWith(TITLE_INSTRUCTION)) return { text: '竞业限制' };
    return answer();
  };
};
const busy = model(() => ({ status: 429, headers: { 'retry-after-ms': '10' } }));

/**
 * A turn answered 503 (a busy model provider: the platform's passing state) tells its client to
 * retry with the same Idempotency-Key, and that retry is answered: the task goes on from its
 * checkpoint (the research that completed is not done again; the specialist gets a new
 * execution), the user message is not stored twice and the reply is stored once. Every app is a
 * real process; the model is an OpenAI-compatible server on a local port.
 */
describe('system: a same-key retry of a turn that failed 503', () => {
  let sys: RunningSystem;
  let fake: FakeOpenAiServer;
  let alice: ReturnType<typeof client>;
  const post = (id: string, content: string, key: string) =>
    alice('POST', `/v1/conversations/${id}/messages`, { content }, { 'Idempotency-Key': key });
  const executions = (taskId: string, app: string) =>
    logLines(sys, app, 'executing', { taskId }).length;
  const newConversation = async () =>
    (await alice('POST', '/v1/conversations', {})).body.conversationId as string;
  const taskOf = async (id: string) => {
    const [user] = await storedMessages(sys.env.MYSQL_URL, id);
    return (await alice('GET', `/v1/tasks/${user.taskId}`)).body;
  };

  beforeAll(async () => {
    fake = await FakeOpenAiServer.start(busy);
    sys = await startSystem({
      env: {
        LLM_PROVIDER: 'openai',
        OPENAI_BASE_URL: fake.baseUrl,
        OPENAI_API_KEY: 'sk-retry-test',
        LLM_MODEL: 'fake-model',
        LLM_PROMPT_USD_PER_MTOK: '2.5',
        LLM_COMPLETION_USD_PER_MTOK: '10',
      },
    });
    alice = client(sys.base, sys.token('tenant-r', 'alice'));
  });
  beforeEach(() => fake.respondWith(busy));
  afterAll(async () => {
    await sys?.stop();
    await fake?.close();
  });

  it('answers the retry 201 from the checkpoint: research not run again, messages stored once', async () => {
    const id = await newConversation();
    const spentBefore: Tokens = fake.usage();
    const first = await post(id, '我跟公司签的劳动合同有问题', 'k-busy');
    expect([first.status, first.body]).toEqual([
      503,
      { statusCode: 503, code: 'UNAVAILABLE', message: `required agent labor-law failed: ${BUSY}` },
    ]);
    const failed = await taskOf(id);
    expect(failed.executions).toMatchObject([
      { agentType: 'legal-research', status: 'COMPLETED' },
      { agentType: 'labor-law', status: 'FAILED', error: { code: 'UNAVAILABLE' } },
    ]);

    fake.respondWith(model());
    const plansBefore = fake.received.filter((r) =>
      r.messages[0]?.content.startsWith(ROUTE_PROMPT),
    );
    const retry = await post(id, '我跟公司签的劳动合同有问题', 'k-busy');
    expect(retry.status).toBe(201);
    expect(retry.body).toMatchObject({
      taskId: failed.taskId,
      agents: ['legal-research', 'labor-law'],
      userMessage: { seq: 1, role: 'user', content: '我跟公司签的劳动合同有问题' },
      reply: { seq: 2, role: 'assistant', agentType: 'labor-law', content: ANSWER.join('') },
    });
    const stored = await storedMessages(sys.env.MYSQL_URL, id);
    expect(stored.map((m) => [m.seq, m.role, m.taskId])).toEqual([
      [1, 'user', failed.taskId],
      [2, 'assistant', failed.taskId],
    ]);
    expect(contiguous(stored)).toBe(true);

    const task = await taskOf(id);
    expect(task.status).toBe('COMPLETED');
    expect(task.executions).toMatchObject([
      { agentType: 'legal-research', status: 'COMPLETED', attempts: 1 },
      { agentType: 'labor-law', status: 'FAILED', error: { code: 'UNAVAILABLE' } },
      { agentType: 'labor-law', status: 'COMPLETED', attempts: 1, error: null },
    ]);
    expect(task.executions[2].agentSessionId).not.toBe(task.executions[1].agentSessionId);
    // The retry saw the research the first attempt wrote.
    expect(task.executions[2].context.sharedKeys).toEqual(['research.statutes']);
    const counts = {
      research: executions(failed.taskId, 'legal-research-agent'),
      laborLaw: executions(failed.taskId, 'labor-law-agent'),
      plans: fake.received.filter((r) => r.messages[0]?.content.startsWith(ROUTE_PROMPT)).length,
    };
    console.log(`busy model, then a same-key retry: ${JSON.stringify(counts)}`);
    expect(counts).toEqual({ research: 1, laborLaw: 2, plans: plansBefore.length });

    // The conversation counts the turn once, and what every model call cost once.
    const conversation = (await alice('GET', `/v1/conversations/${id}`)).body;
    expect(conversation).toMatchObject({ activeTaskIds: [], messageCount: 2, title: '竞业限制' });
    const now = fake.usage();
    expect(conversation.usage).toMatchObject({
      promptTokens: now.promptTokens - spentBefore.promptTokens,
      completionTokens: now.completionTokens - spentBefore.completionTokens,
    });

    // Done: the key answers the same TurnView again, and nothing runs.
    const again = await post(id, '我跟公司签的劳动合同有问题', 'k-busy');
    expect([again.status, again.body]).toEqual([201, retry.body]);
    expect(executions(failed.taskId, 'labor-law-agent')).toBe(2);
    expect(await storedMessages(sys.env.MYSQL_URL, id)).toHaveLength(2);
  });

  it("passes on the provider's Retry-After when it asks for longer than Loom waits", async () => {
    // 120 s: past what Loom waits within a call (60 s), so the provider's 429 is the answer.
    fake.respondWith(model(() => ({ status: 429, headers: { 'retry-after': '120' } })));
    const id = await newConversation();
    const busyTurn = await post(id, '加班费怎么算', 'k-retry-after');
    expect(busyTurn.status).toBe(503);
    expect(busyTurn.headers.get('retry-after')).toBe('120');
    // The TaskView keeps the error as API.md has it.
    const task = await taskOf(id);
    expect(Object.keys(task.executions[1].error).sort()).toEqual(['code', 'message']);
  });

  it('runs the task once for two retries sent together', async () => {
    const id = await newConversation();
    expect((await post(id, '公司拖欠工资怎么办', 'k-twice')).status).toBe(503);
    // A slow answer, so that the second retry arrives while the first is at work.
    fake.respondWith(model(() => ({ chunks: ANSWER, delayMs: 1500 })));
    const [a, b] = await Promise.all([
      post(id, '公司拖欠工资怎么办', 'k-twice'),
      post(id, '公司拖欠工资怎么办', 'k-twice'),
    ]);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.body).toEqual(a.body);
    const task = await taskOf(id);
    expect(task.executions.map((e: any) => [e.agentType, e.status])).toEqual([
      ['legal-research', 'COMPLETED'],
      ['labor-law', 'FAILED'],
      ['labor-law', 'COMPLETED'],
    ]);
    expect(executions(task.taskId, 'labor-law-agent')).toBe(2);
    const stored = await storedMessages(sys.env.MYSQL_URL, id);
    expect(stored.map((m) => m.role)).toEqual(['user', 'assistant']);
  });

  it('streams the retry of a failed turn as the model writes it', async () => {
    const id = await newConversation();
    expect((await post(id, '试用期被辞退有补偿吗', 'k-stream')).status).toBe(503);
    fake.respondWith(model());
    const res = await fetch(`${sys.base}/v1/conversations/${id}/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${sys.token('tenant-r', 'alice')}`,
        'idempotency-key': 'k-stream',
      },
      body: JSON.stringify({ content: '试用期被辞退有补偿吗' }),
    });
    const events = [...(await res.text()).matchAll(/event: (\w+)\ndata: (.*)\n/g)].map(
      ([, event, data]) => [event, JSON.parse(data)],
    );
    expect(events.slice(0, -1)).toEqual(ANSWER.map((text) => ['delta', { text }]));
    expect(events.at(-1)).toMatchObject([
      'done',
      { userMessage: { seq: 1 }, reply: { seq: 2, content: ANSWER.join('') } },
    ]);
  });

  it('answers 409 once later turns came in: the reply would land after them', async () => {
    const id = await newConversation();
    expect((await post(id, '加班费怎么算', 'k-late')).status).toBe(503);
    fake.respondWith(model());
    const next = await post(id, '年假有几天', 'k-next');
    expect(next.status).toBe(201);
    const retry = await post(id, '加班费怎么算', 'k-late');
    expect([retry.status, retry.body]).toEqual([409, WENT_ON_CONFLICT]);
    const stored = await storedMessages(sys.env.MYSQL_URL, id);
    expect(stored.map((m) => [m.seq, m.role])).toEqual([
      [1, 'user'],
      [2, 'user'],
      [3, 'assistant'],
    ]);
    const task = await taskOf(id);
    expect(task.status).toBe('FAILED');
    expect(executions(task.taskId, 'labor-law-agent')).toBe(1);
  });

  it("keeps a 502 (the model's own failure) final, and a different message under the key 409", async () => {
    const id = await newConversation();
    fake.respondWith(
      model(() => ({ status: 429, errorCode: 'insufficient_quota', errorMessage: 'quota' })),
    );
    const broke = await post(id, '竞业协议有效吗', 'k-quota');
    expect([broke.status, broke.body.code]).toEqual([502, 'AGENT_FAILED']);
    fake.respondWith(model());
    const retry = await post(id, '竞业协议有效吗', 'k-quota');
    expect([retry.status, retry.body]).toEqual([502, broke.body]);
    const task = await taskOf(id);
    expect(executions(task.taskId, 'labor-law-agent')).toBe(1);

    const other = await newConversation();
    fake.respondWith(busy);
    expect((await post(other, '经济补偿怎么算', 'k-other')).status).toBe(503);
    fake.respondWith(model());
    const changed = await post(other, '别的问题', 'k-other');
    expect([changed.status, changed.body.code, changed.body.message]).toEqual([
      409,
      'CONFLICT',
      'this Idempotency-Key was already used for a different message',
    ]);
    const otherTask = await taskOf(other);
    expect(otherTask.status).toBe('FAILED');
    expect(otherTask.executions).toHaveLength(2);
    expect(await storedMessages(sys.env.MYSQL_URL, other)).toHaveLength(1);
  });
});
