import { FakeOpenAiServer, ReceivedCompletion } from '@loom/testing';
import {
  SUMMARY_INSTRUCTION,
  TITLE_INSTRUCTION,
} from '../apps/orchestrator/src/turn/history-prompts';
import { client, RunningSystem, startSystem, streamTurn } from './system';

const KEY = 'sk-sys-SECRET-00112233445566778899';
const ROUTE_PROMPT = 'You route a legal consultation';
/** LLM_PROMPT_USD_PER_MTOK and LLM_COMPLETION_USD_PER_MTOK of every app. */
const PRICES = { prompt: 2.5, completion: 10 };

type Tokens = { promptTokens: number; completionTokens: number };

/** A conversation's usage is what the provider reported since `before`, priced. */
function expectUsage(usage: Tokens & { costUsd: number }, now: Tokens, before?: Tokens): void {
  const promptTokens = now.promptTokens - (before?.promptTokens ?? 0);
  const completionTokens = now.completionTokens - (before?.completionTokens ?? 0);
  expect(usage).toMatchObject({ promptTokens, completionTokens });
  const cost = (promptTokens * PRICES.prompt + completionTokens * PRICES.completion) / 1e6;
  expect(usage.costUsd).toBeGreaterThan(0);
  expect(usage.costUsd).toBeCloseTo(cost, 12);
}

/** Which of Loom's model calls a request is, from its prompt. */
function purposeOf(req: ReceivedCompletion): 'plan' | 'title' | 'summary' | 'answer' {
  const system = req.messages[0]?.content ?? '';
  if (system.startsWith(ROUTE_PROMPT)) return 'plan';
  if (system.startsWith(TITLE_INSTRUCTION)) return 'title';
  if (system.startsWith(SUMMARY_INSTRUCTION)) return 'summary';
  return 'answer';
}

/**
 * The consultation with LLM_PROVIDER=openai: every app as a process, the planner, the title and
 * the labor-law agent calling an OpenAI-compatible endpoint over HTTP with the real `openai`
 * client. Checks what a model is actually sent (the first turn and the research in the follow-up's
 * prompt), that streamed deltas reach the HTTP client, that usage is the provider's, and that a
 * failing model gives a typed error and loses nothing.
 */
describe('system: the consultation with an OpenAI-compatible model', () => {
  let sys: RunningSystem;
  let model: FakeOpenAiServer;
  const calls = (purpose: string) => model.received.filter((r) => purposeOf(r) === purpose);

  /** The consultation's model; each test starts from it and may answer differently. */
  const consultation = (req: ReceivedCompletion) => {
    switch (purposeOf(req)) {
      case 'plan':
        return { text: '{"intent": "labor-law", "agents": ["legal-research", "labor-law"]}' };
      case 'title':
        return { text: '劳动合同与竞业限制' };
      case 'summary':
        return { text: 'summary' };
      default:
        return {
          chunks: [`第${req.messages.length}条：`, '依据劳动合同法，', '竞业限制最长两年。'],
        };
    }
  };

  beforeAll(async () => {
    model = await FakeOpenAiServer.start(consultation);
    sys = await startSystem({
      env: {
        LLM_PROVIDER: 'openai',
        OPENAI_BASE_URL: model.baseUrl,
        OPENAI_API_KEY: KEY,
        LLM_MODEL: 'fake-model',
        LLM_PROMPT_USD_PER_MTOK: String(PRICES.prompt),
        LLM_COMPLETION_USD_PER_MTOK: String(PRICES.completion),
      },
    });
  });
  beforeEach(() => model.respondWith(consultation));
  afterAll(async () => {
    await sys?.stop();
    await model?.close();
  });

  it('routes with the model, sends it the conversation so far, streams its answer and records its usage', async () => {
    const alice = client(sys.base, sys.token('tenant-o', 'alice'));
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;

    const first = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    expect(first.status).toBe(201);
    expect(first.body.agents).toEqual(['legal-research', 'labor-law']);
    expect(first.body.reply).toMatchObject({
      agentType: 'labor-law',
      content: '第2条：依据劳动合同法，竞业限制最长两年。',
    });

    const { deltas, done } = await streamTurn(
      sys.base,
      sys.token('tenant-o', 'alice'),
      id,
      '上面那份合同里关于竞业协议的部分怎么看?',
    );
    // The model's own chunks, relayed from the agent's process through Redis to the HTTP client:
    // the first goes out alone, and chunks that arrive while one is being sent go out together
    // in the next (DeltaPublisher), so the later boundaries depend on timing, never the text.
    expect(deltas[0]).toBe('第4条：');
    expect(deltas.join('')).toBe('第4条：依据劳动合同法，竞业限制最长两年。');
    expect(done.reply.content).toBe(deltas.join(''));

    // Every call carried the key; the follow-up's answer prompt held the first turn and the research.
    expect(model.received.every((r) => r.authorization === `Bearer ${KEY}`)).toBe(true);
    expect(model.received.every((r) => r.model === 'fake-model')).toBe(true);
    const answers = calls('answer');
    expect(answers).toHaveLength(2);
    expect(answers.every((r) => r.stream)).toBe(true); // a JSON turn's is collected from a stream
    const followUp = answers[1].messages;
    expect(followUp.slice(1)).toEqual([
      { role: 'user', content: '我跟公司签的劳动合同有问题' },
      { role: 'assistant', content: first.body.reply.content },
      { role: 'user', content: '上面那份合同里关于竞业协议的部分怎么看?' },
    ]);
    const task = (await alice('GET', `/v1/tasks/${done.taskId}`)).body;
    const statutes = task.sharedContext['research.statutes'].value as Array<{ id: string }>;
    expect(statutes.length).toBeGreaterThan(0);
    for (const s of statutes) expect(followUp[0].content).toContain(s.id);
    expect(task.executions.find((e: any) => e.agentType === 'labor-law').context).toMatchObject({
      historyMessages: 2,
      sharedKeys: ['research.statutes'],
    });

    // The planner asked the model on both turns, with the first turn in the follow-up's prompt.
    const plans = calls('plan');
    expect(plans).toHaveLength(2);
    expect(JSON.parse(plans[1].messages[1].content)).toMatchObject({
      currentIntent: 'labor-law',
      message: '上面那份合同里关于竞业协议的部分怎么看?',
    });
    // One title, from the model; usage is what the provider reported for every call made.
    const conversation = (await alice('GET', `/v1/conversations/${id}`)).body;
    expect(conversation.title).toBe('劳动合同与竞业限制');
    expect(calls('title')).toHaveLength(1);
    const reported = model.usage();
    const counts = { modelCalls: model.received.length, reported, usage: conversation.usage };
    console.log(`openai consultation: ${JSON.stringify(counts)}`);
    expectUsage(conversation.usage, reported);
  });

  it('answers a failing or blank model with a typed error, stores no reply, and goes on once it is back', async () => {
    const bob = client(sys.base, sys.token('tenant-o', 'bob'));
    const id = (await bob('POST', '/v1/conversations', {})).body.conversationId;
    const spentBefore = model.usage();
    const before = model.received.length;
    const plan = { text: '{"intent": "labor-law", "agents": ["labor-law"]}' };
    model.respondWith((req) =>
      purposeOf(req) === 'answer' ? { status: 500, headers: { 'retry-after-ms': '10' } } : plan,
    );
    const failed = await bob('POST', `/v1/conversations/${id}/messages`, {
      content: '公司不给加班费怎么办',
    });
    const attempts = model.received.slice(before).filter((r) => purposeOf(r) === 'answer').length;
    console.log(`failing model: status ${failed.status}, answer attempts ${attempts}`);
    expect(failed.status).toBe(502);
    // The status of the provider's answer, not its text (nor the key).
    expect(failed.body).toEqual({
      statusCode: 502,
      code: 'AGENT_FAILED',
      message: 'required agent labor-law failed: the model call failed (HTTP 500)',
    });
    expect(attempts).toBe(3); // the SDK's two retries

    model.respondWith((req) => (purposeOf(req) === 'answer' ? { text: '  ' } : plan));
    const blank = await bob('POST', `/v1/conversations/${id}/messages`, { content: '怎么办?' });
    expect(blank.status).toBe(502);
    expect(blank.body.message).toBe(
      'required agent labor-law failed: the model returned an empty answer',
    );
    const afterFailures = (await bob('GET', `/v1/conversations/${id}/messages`)).body.items;
    expect(afterFailures.map((m: any) => m.role)).toEqual(['user', 'user']);
    // The planner's calls were spent all the same, and counted.
    const usageOf = async () => (await bob('GET', `/v1/conversations/${id}`)).body.usage;
    expectUsage(await usageOf(), model.usage(), spentBefore);

    model.respondWith((req) =>
      purposeOf(req) === 'answer'
        ? { text: `第${req.messages.length}条：好了` }
        : purposeOf(req) === 'plan'
          ? plan
          : { text: '加班费' },
    );
    const next = await bob('POST', `/v1/conversations/${id}/messages`, { content: '那现在呢?' });
    expect(next.status).toBe(201);
    const items = (await bob('GET', `/v1/conversations/${id}/messages`)).body.items;
    expect(items.map((m: any) => [m.seq, m.role])).toEqual([
      [1, 'user'],
      [2, 'user'],
      [3, 'user'],
      [4, 'assistant'],
    ]);
    expectUsage(await usageOf(), model.usage(), spentBefore);
  });

  it('answers a busy model (429 after the retries) 503 UNAVAILABLE, a quota used up 502', async () => {
    const carol = client(sys.base, sys.token('tenant-o', 'carol'));
    const id = (await carol('POST', '/v1/conversations', {})).body.conversationId;
    const plan = { text: '{"intent": "labor-law", "agents": ["labor-law"]}' };
    model.respondWith((req) =>
      purposeOf(req) === 'answer' ? { status: 429, headers: { 'retry-after-ms': '10' } } : plan,
    );
    const busy = await carol('POST', `/v1/conversations/${id}/messages`, { content: '加班费呢' });
    model.respondWith((req) =>
      purposeOf(req) === 'answer'
        ? {
            status: 429,
            errorCode: 'insufficient_quota',
            errorMessage: 'You exceeded your current quota',
          }
        : plan,
    );
    const broke = await carol('POST', `/v1/conversations/${id}/messages`, { content: '年假呢' });
    console.log(
      `busy model: ${busy.status} ${busy.body.code}; quota used up: ${broke.status} ${broke.body.code}`,
    );
    // Rate limited: the platform's temporary state, worth the client's retry.
    expect([busy.status, busy.body]).toEqual([
      503,
      {
        statusCode: 503,
        code: 'UNAVAILABLE',
        message:
          'required agent labor-law failed: the model endpoint is busy (rate limited or overloaded): retry later (HTTP 429)',
      },
    ]);
    expect([broke.status, broke.body.code, broke.body.message]).toEqual([
      502,
      'AGENT_FAILED',
      "required agent labor-law failed: the model endpoint's quota for Loom's key is used up (HTTP 429)",
    ]);
  });

  it('ends a stream the model breaks off with an error event, after the text it did send', async () => {
    const dave = client(sys.base, sys.token('tenant-o', 'dave'));
    const id = (await dave('POST', '/v1/conversations', {})).body.conversationId;
    model.respondWith((req) =>
      purposeOf(req) === 'answer'
        ? { chunks: ['已经写了一半，', '后半截'], cutAfterChunks: 1 }
        : consultation(req),
    );
    const res = await fetch(`${sys.base}/v1/conversations/${id}/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${sys.token('tenant-o', 'dave')}`,
      },
      body: JSON.stringify({ content: '试用期被辞退有补偿吗' }),
    });
    const events = [...(await res.text()).matchAll(/event: (\w+)\ndata: (.*)\n/g)].map(
      ([, event, data]) => [event, JSON.parse(data)],
    );
    expect(events).toEqual([
      ['delta', { text: '已经写了一半，' }],
      [
        'error',
        {
          statusCode: 502,
          code: 'AGENT_FAILED',
          message: "required agent labor-law failed: the model's answer broke off",
        },
      ],
    ]);
    const items = (await dave('GET', `/v1/conversations/${id}/messages`)).body.items;
    expect(items.map((m: any) => m.role)).toEqual(['user']); // half an answer is not stored
    // The stream's status was 200, so the failure shows in the orchestrator's log instead.
    const logged = sys
      .logs()
      .filter(
        (l) =>
          l.app === 'orchestrator' &&
          l.json?.level === 'error' &&
          JSON.stringify(l.json).includes('required agent labor-law failed'),
      );
    expect(logged.length).toBeGreaterThan(0);
  });

  it('refuses an answer cut off at the token limit: a typed error, no reply stored, its cost counted', async () => {
    const erin = client(sys.base, sys.token('tenant-o', 'erin'));
    const id = (await erin('POST', '/v1/conversations', {})).body.conversationId;
    const spentBefore = model.usage();
    const cutOff = { chunks: ['根据劳动合同法第', '三十九条，'], finishReason: 'length' };
    model.respondWith((req) =>
      purposeOf(req) === 'answer' || purposeOf(req) === 'title' ? cutOff : consultation(req),
    );
    const failed = await erin('POST', `/v1/conversations/${id}/messages`, {
      content: '公司单方面调岗降薪合法吗',
    });
    expect(failed.status).toBe(502);
    expect(failed.body.message).toBe(
      "required agent labor-law failed: the model's answer was cut off at its token limit",
    );
    // Streamed: the text already sent, then the error; nothing of it stored.
    const res = await fetch(`${sys.base}/v1/conversations/${id}/messages`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${sys.token('tenant-o', 'erin')}`,
      },
      body: JSON.stringify({ content: '那我该怎么办?' }),
    });
    const events = [...(await res.text()).matchAll(/event: (\w+)\ndata: (.*)\n/g)].map(
      ([, event, data]) => [event, JSON.parse(data)],
    );
    // Its chunks as one delta or more (those sent while one is on its way go out together).
    const kinds = events.map(([event]) => event);
    expect(kinds.at(-1)).toBe('error');
    expect(kinds.length).toBeGreaterThan(1);
    expect(kinds.slice(0, -1).every((k) => k === 'delta')).toBe(true);
    expect(events.at(-1)![1].message).toMatch(/cut off at its token limit$/);
    const items = (await erin('GET', `/v1/conversations/${id}/messages`)).body.items;
    expect(items.map((m: any) => m.role)).toEqual(['user', 'user']); // nothing half-stored
    // The next turn is answered; its cut-off title falls back to the question's own words, and
    // every cut-off call was counted.
    model.respondWith((req) => (purposeOf(req) === 'title' ? cutOff : consultation(req)));
    const next = await erin('POST', `/v1/conversations/${id}/messages`, { content: '调岗合法吗' });
    expect(next.status).toBe(201);
    const conversation = (await erin('GET', `/v1/conversations/${id}`)).body;
    expect(conversation.title).toBe('调岗合法吗');
    expectUsage(conversation.usage, model.usage(), spentBefore);
  });

  it('asks the model to fold the earlier summary into the next one, and shows it to the agents', async () => {
    const carol = client(sys.base, sys.token('tenant-o', 'carol'));
    const id = (await carol('POST', '/v1/conversations', {})).body.conversationId;
    const spentBefore = model.usage();
    let summaries = 0;
    model.respondWith((req) => {
      switch (purposeOf(req)) {
        case 'plan':
          return { text: '{"intent": "labor-law", "agents": ["labor-law"]}' };
        case 'summary':
          return { text: `摘要${++summaries}` };
        case 'title':
          return { text: '加班' };
        default:
          return { text: `答${req.messages.length}` };
      }
    });
    // 16 turns make 32 messages: #1–#12 are folded; the 17th folds #13–#14 into that summary.
    for (let t = 1; t <= 17; t++) {
      const res = await carol('POST', `/v1/conversations/${id}/messages`, {
        content: `第${t}个问题：加班费怎么算?`,
      });
      expect(res.status).toBe(201);
    }
    const asked = calls('summary').slice(-2);
    expect(asked).toHaveLength(2);
    expect(asked[0].messages[1].content).not.toContain('Earlier summary');
    expect(asked[0].messages[1].content).toContain('#1 user: "第1个问题');
    expect(asked[0].messages[1].content).toContain('#12 assistant:');
    expect(asked[1].messages[1].content).toMatch(/^Earlier summary:\n"摘要1"\n/);
    expect(asked[1].messages[1].content).toContain('#13 user: "第7个问题');
    expect(asked[1].messages[1].content).not.toContain('#12 ');
    // The next answer's prompt carries the new summary and the 20 messages after its range: the
    // agent reads the summary fresh, since an older one with the same budget would leave out
    // the messages it did not cover (#13, #14).
    await carol('POST', `/v1/conversations/${id}/messages`, { content: '总结一下?' });
    const last = calls('answer').at(-1)!;
    expect(last.messages[0].content).toMatch(/\(seq 1-14\): 摘要2$/m);
    expect(last.messages[1].content).toBe('第8个问题：加班费怎么算?'); // #15
    expect(last.messages).toHaveLength(22); // the system prompt, #15–#34, the question
    expect(last.messages.at(-1)!.content).toBe('总结一下?');

    // That turn folded #15–#16 (摘要3). A blank summary (the next turn's, of #17–#18) is not
    // stored: the agents keep 摘要3, and the next fold starts from it, at #17 still.
    let blank = true;
    const answerAll = (req: ReceivedCompletion) => {
      if (purposeOf(req) !== 'summary') return { text: `答${req.messages.length}` };
      return { text: blank ? ' ' : `摘要${++summaries}` };
    };
    model.respondWith((req) =>
      purposeOf(req) === 'plan'
        ? { text: '{"intent": "labor-law", "agents": ["labor-law"]}' }
        : answerAll(req),
    );
    await carol('POST', `/v1/conversations/${id}/messages`, { content: '还有吗?' });
    blank = false;
    await carol('POST', `/v1/conversations/${id}/messages`, { content: '然后呢?' });
    const [blankAsk, nextAsk] = calls('summary').slice(-2);
    expect(blankAsk.messages[1].content).toMatch(/^Earlier summary:\n"摘要3"\n/);
    expect(blankAsk.messages[1].content).toContain('#17 user: "第9个问题');
    expect(calls('answer').at(-1)!.messages[0].content).toMatch(/\(seq 1-16\): 摘要3$/m);
    expect(nextAsk.messages[1].content).toMatch(/^Earlier summary:\n"摘要3"\n/);
    expect(nextAsk.messages[1].content).toContain('#17 user: "第9个问题');
    const { usage } = (await carol('GET', `/v1/conversations/${id}`)).body;
    expectUsage(usage, model.usage(), spentBefore);
  });

  it('logged the key nowhere, although the failing endpoint quoted it back', () => {
    const errors = model.received.length;
    expect(errors).toBeGreaterThan(0);
    const lines = sys.logs();
    expect(lines.some((l) => l.line.includes('HTTP 500'))).toBe(true); // the failures were logged
    expect(lines.filter((l) => l.line.includes(KEY))).toEqual([]);
  });
});
