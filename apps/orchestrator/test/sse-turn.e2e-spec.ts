import { Injectable } from '@nestjs/common';
import { request as httpRequest, Server } from 'http';
import { AddressInfo } from 'net';
import request from 'supertest';
import { AgentHandler, AgentTools, bootstrapAgent, LlmError } from '@loom/agent-kit';
import {
  ConversationRepository,
  ExecutionStatus,
  LoomError,
  LoomErrorCode,
  SessionContext,
  TaskRepository,
  TaskStatus,
} from '@loom/session';
import { parsePrometheusText, promSeries } from '@loom/testing';
import {
  executionFixture,
  InProcessOrchestrator,
  startInProcessOrchestrator,
  storeAcceptedTurn,
  taskFixture,
} from './in-process.support';

const usage = { promptTokens: 1, completionTokens: 1, costUsd: 0 };

/** Resolved by a test once its client has seen what it waits for (a keep-alive comment). */
let release: () => void = () => undefined;
/** What let a `… when streamed live` answer go on: the client (it saw the start) or a time-out. */
let releasedBy = '';
/** Every question the agent was asked, in order. */
const asked: string[] = [];

/**
 * Streams its answer in three pieces; a question `… when kept alive` waits for `release` first,
 * one `… when streamed live` for `release` after its first piece, one `… and fail` fails (502 AGENT_FAILED), one `… and be busy` fails for now (503 UNAVAILABLE).
 */
@Injectable()
class StreamingHandler implements AgentHandler {
  async handle(ctx: SessionContext, tools: AgentTools): Promise<any> {
    asked.push(ctx.question);
    const answer = `you said: ${ctx.question}`;
    if (ctx.question.includes('and fail')) throw new Error('the echo broke');
    if (ctx.question.includes('and be rate limited')) {
      // Its model provider is busy after the first words and asks for 7 s.
      tools.onDelta?.(answer.slice(0, 5));
      throw Object.assign(new LlmError('HTTP 429', 429), { busy: true, retryAfterS: 7 });
    }
    if (ctx.question.includes('and be busy'))
      throw new LoomError(LoomErrorCode.UNAVAILABLE, 'the echo is busy');
    if (ctx.question.includes('when streamed live')) {
      // Its first piece, then the rest once the client has seen it (or after 4 s: it never did).
      tools.onDelta?.(answer.slice(0, 10));
      releasedBy = await new Promise<string>((resolve) => {
        const timer = setTimeout(() => resolve('timeout'), 4000);
        release = () => (clearTimeout(timer), resolve('client'));
      });
      tools.onDelta?.(answer.slice(10));
      return { answer, usage };
    }
    if (ctx.question.includes('when kept alive'))
      await new Promise<void>((resolve) => {
        // Not kept alive: it answers all the same after 4 s, and the test fails.
        const timer = setTimeout(resolve, 4000);
        release = () => (clearTimeout(timer), resolve());
      });
    for (const piece of [answer.slice(0, 5), answer.slice(5, 10), answer.slice(10)])
      tools.onDelta?.(piece);
    return { answer, usage };
  }
}

const METRICS_TOKEN = 'prometheus-scrape-token-sse-01';

const events = (text: string) =>
  [...text.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)].map((m) => [m[1], JSON.parse(m[2])]);

describe('a streamed turn as a client sees it (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('sseturn', {
      env: { LOOM_METRICS_TOKEN: METRICS_TOKEN, SSE_KEEPALIVE_MS: '100' },
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'echo',
            description: 'echoes',
            role: 'specialist',
            intents: ['echo'],
            keywords: ['echo'],
          },
          StreamingHandler,
          env,
        ),
      ],
    });
  });
  afterAll(() => orch?.close());

  const auth = () => orch.auth('sam', 'tenant-sse');
  const newConversation = async () =>
    (
      await request(orch.app.getHttpServer())
        .post('/v1/conversations')
        .set('authorization', auth())
        .send({})
    ).body.conversationId as string;
  const post = (id: string, content: string, key?: string, accept = 'text/event-stream') => {
    const req = request(orch.app.getHttpServer())
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth())
      .set('accept', accept);
    if (key) req.set('idempotency-key', key);
    return req.send({ content });
  };

  it('answers a key reused with another message 409 with its own status, as JSON does', async () => {
    const id = await newConversation();
    const first = await post(id, 'echo one', 'k1');
    expect([first.status, events(first.text).at(-1)?.[0]]).toEqual([200, 'done']);
    for (const accept of ['application/json', 'text/event-stream']) {
      const other = await post(id, 'echo two', 'k1', accept);
      expect([accept, other.status, other.type, other.body.code]).toEqual([
        accept,
        409,
        'application/json',
        'CONFLICT',
      ]);
    }
    // Added nothing: the first turn's two messages.
    const list = await request(orch.app.getHttpServer())
      .get(`/v1/conversations/${id}/messages`)
      .set('authorization', auth());
    expect(list.body.items.map((m: { content: string }) => m.content)).toEqual([
      'echo one',
      'you said: echo one',
    ]);
    // The same message replays the stored turn as deltas, then done.
    const replay = await post(id, 'echo one', 'k1');
    const got = events(replay.text);
    const { taskId } = events(first.text).at(-1)![1];
    expect(got.at(-1)).toEqual(['done', expect.objectContaining({ taskId })]);
    expect(
      got
        .filter(([e]) => e === 'delta')
        .map(([, d]) => d.text)
        .join(''),
    ).toBe('you said: echo one');
  });

  it('negotiates Accept by type and q whatever charset a client names with it', async () => {
    const id = await newConversation();
    const answers: Array<[string, number, string]> = [];
    for (const accept of [
      'text/event-stream; charset=utf-8',
      'text/event-stream;charset=UTF-8, application/json;q=0.5',
      'application/json; charset=utf-8, text/event-stream;q=0.5',
      'application/json;charset="utf-8"',
      'text/event-stream;q=0.9, application/json',
    ]) {
      const res = await post(id, 'echo accept', undefined, accept);
      answers.push([accept, res.status, res.type]);
    }
    expect(answers).toEqual([
      ['text/event-stream; charset=utf-8', 200, 'text/event-stream'],
      ['text/event-stream;charset=UTF-8, application/json;q=0.5', 200, 'text/event-stream'],
      ['application/json; charset=utf-8, text/event-stream;q=0.5', 201, 'application/json'],
      ['application/json;charset="utf-8"', 201, 'application/json'],
      ['text/event-stream;q=0.9, application/json', 201, 'application/json'],
    ]);
  });

  it('counts a streamed turn refused before its stream as the JSON turn counts it', async () => {
    const turns = async () =>
      promSeries(
        parsePrometheusText(
          (
            await request(orch.app.getHttpServer())
              .get('/metrics')
              .set('authorization', `Bearer ${METRICS_TOKEN}`)
          ).text,
        ),
        'loom_turns_total',
      );
    const id = await newConversation();
    await post(id, 'echo three', 'k3');
    const counted: Record<string, Record<string, number>> = {};
    for (const accept of ['application/json', 'text/event-stream']) {
      const before = await turns();
      const answers = [
        await post('c_missingconversation', 'echo', undefined, accept),
        await post(id, 'a'.repeat(32_001), undefined, accept),
        await post(id, 'a\ud800b', undefined, accept),
        await post(id, 'echo four', 'k3', accept),
      ].map((res) => [res.status, res.body.code]);
      expect(answers).toEqual([
        [404, 'NOT_FOUND'],
        [413, 'PAYLOAD_TOO_LARGE'],
        [400, 'VALIDATION_FAILED'],
        [409, 'CONFLICT'],
      ]);
      const after = await turns();
      counted[accept] = Object.fromEntries(
        Object.entries(after)
          .map(([outcome, n]) => [outcome, n - (before[outcome] ?? 0)])
          .filter(([, n]) => n !== 0),
      );
    }
    expect(counted['text/event-stream']).toEqual(counted['application/json']);
    expect(counted['application/json']).toEqual({
      NOT_FOUND: 1,
      PAYLOAD_TOO_LARGE: 1,
      VALIDATION_FAILED: 1,
      CONFLICT: 1,
    });
  });

  /** A streamed turn sent with fetch, read as it comes. */
  const stream = async (id: string, content: string, key?: string) => {
    const server = orch.app.getHttpServer() as Server;
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    return fetch(`http://127.0.0.1:${port}/v1/conversations/${id}/messages`, {
      method: 'POST',
      headers: {
        authorization: auth(),
        accept: 'text/event-stream',
        'content-type': 'application/json',
        ...(key ? { 'idempotency-key': key } : {}),
      },
      body: JSON.stringify({ content }),
    });
  };

  it('sends SSE comments while the answer has not started, so idle proxies keep the stream', async () => {
    const id = await newConversation();
    const res = await stream(id, 'echo when kept alive');
    expect(res.status).toBe(200);
    // and asks a proxy (nginx) not to buffer it, which would hold the deltas back to the end
    expect(res.headers.get('x-accel-buffering')).toBe('no');
    let text = '';
    const decoder = new TextDecoder();
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(bytes, { stream: true });
      // The agent answers once the client has seen a sign of life.
      if (text.includes(': keep-alive\n\n')) release();
    }
    const firstDelta = text.indexOf('event: delta');
    expect(text.slice(0, firstDelta)).toMatch(/^(: keep-alive\n\n)+$/);
    expect(events(text).at(-1)).toEqual([
      'done',
      expect.objectContaining({
        reply: expect.objectContaining({ content: 'you said: echo when kept alive' }),
      }),
    ]);
  });

  it('tells a stream that fails after its 200 when to retry, as a JSON turn tells it in Retry-After', async () => {
    const id = await newConversation();
    const json = await post(id, 'echo and be rate limited', undefined, 'application/json');
    expect([json.status, json.headers['retry-after'], json.body.code]).toEqual([
      503,
      '7',
      'UNAVAILABLE',
    ]);
    const streamed = await post(id, 'echo and be rate limited, streamed');
    expect(streamed.status).toBe(200);
    expect(events(streamed.text).at(-1)).toEqual([
      'error',
      {
        statusCode: 503,
        code: 'UNAVAILABLE',
        message: json.body.message,
        retryAfter: 7,
      },
    ]);
  });

  it("answers a same-key retry of a failed turn with the key's stored status, as JSON does", async () => {
    const id = await newConversation();
    const first = await post(id, 'echo and fail', 'kf', 'application/json');
    expect([first.status, first.body.code]).toEqual([502, 'AGENT_FAILED']);
    // A 503 is run again by its retry, unless the conversation went on since: then 409.
    const busy = await post(id, 'echo and be busy', 'kb', 'application/json');
    expect([busy.status, busy.body.code]).toEqual([503, 'UNAVAILABLE']);
    expect((await post(id, 'echo after it', undefined, 'application/json')).status).toBe(201);
    for (const accept of ['application/json', 'text/event-stream']) {
      const answers = [
        await post(id, 'echo and fail', 'kf', accept),
        await post(id, 'echo and be busy', 'kb', accept),
      ].map((res) => [res.status, res.type, res.body.code]);
      expect([accept, answers]).toEqual([
        accept,
        [
          [502, 'application/json', 'AGENT_FAILED'],
          [409, 'application/json', 'CONFLICT'],
        ],
      ]);
    }
  });

  it('finishes and stores a turn whose client went away mid-stream; its retry gets it all', async () => {
    const id = await newConversation();
    const question = 'echo when streamed live, then hung up on';
    const server = orch.app.getHttpServer() as Server;
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    releasedBy = '';
    // The client reads the first delta, then closes its connection.
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: `/v1/conversations/${id}/messages`,
          headers: {
            authorization: auth(),
            accept: 'text/event-stream',
            'content-type': 'application/json',
            'idempotency-key': 'kgone',
          },
        },
        (res) => {
          let text = '';
          res.on('data', (bytes) => {
            text += bytes;
            if (!text.includes('event: delta')) return;
            req.destroy();
            resolve();
          });
          res.on('end', () => reject(new Error('the stream ended before its first delta')));
        },
      );
      req.on('error', () => undefined);
      req.end(JSON.stringify({ content: question }));
    });
    // Let the agent go on only once the server has seen the client go.
    await new Promise((r) => setTimeout(r, 200));
    release();
    const contents = async () =>
      (
        await request(orch.app.getHttpServer())
          .get(`/v1/conversations/${id}/messages`)
          .set('authorization', auth())
      ).body.items.map((m: { content: string }) => m.content);
    // The turn goes on without its client: its reply is stored.
    for (let i = 0; i < 100 && (await contents()).length < 2; i++)
      await new Promise((r) => setTimeout(r, 100));
    expect(await contents()).toEqual([question, `you said: ${question}`]);
    expect(releasedBy).toBe('client');

    // The retry under its key, streamed, gets the whole reply as deltas, then done; as JSON, the
    // same TurnView; neither adds anything nor asks the agent again.
    const streamed = events((await post(id, question, 'kgone')).text);
    const done = streamed.at(-1);
    expect(done?.[0]).toBe('done');
    expect(
      streamed
        .filter(([e]) => e === 'delta')
        .map(([, d]) => d.text)
        .join(''),
    ).toBe(`you said: ${question}`);
    const json = await post(id, question, 'kgone', 'application/json');
    expect([json.status, json.body]).toEqual([201, done?.[1]]);
    expect(asked.filter((q) => q === question)).toHaveLength(1);
    // The conversation's lock is free: the next turn runs at once.
    expect((await post(id, 'echo next', undefined, 'application/json')).status).toBe(201);
    expect(await contents()).toEqual([
      question,
      `you said: ${question}`,
      'echo next',
      'you said: echo next',
    ]);
  });

  it('streams the answer live to a same-key retry that resumes an interrupted turn', async () => {
    // The turn's orchestrator died after it created the task: its lease has lapsed, its
    // specialist's execution was recorded as dispatched.
    const owner = { tenantId: 'tenant-sse', userId: 'sam' };
    const { meta } = await orch.get(ConversationRepository).create(owner);
    const id = meta.conversationId;
    const question = 'echo when streamed live';
    const accepted = await storeAcceptedTurn(orch, owner, id, {
      taskId: 't_sseresumed0001',
      question,
      key: 'kr',
    });
    await orch.get(TaskRepository).create(
      owner,
      taskFixture(accepted, 'echo', {
        status: TaskStatus.RUNNING,
        executions: [
          executionFixture('a_sseresumed0001', 'echo', { status: ExecutionStatus.RUNNING }),
        ],
        lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
      }),
    );
    await orch
      .get(ConversationRepository)
      .save(owner, { ...meta, activeTaskIds: [accepted.taskId] });

    releasedBy = '';
    const res = await stream(id, question, 'kr');
    let text = '';
    const decoder = new TextDecoder();
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(bytes, { stream: true });
      if (text.includes('event: delta')) release();
    }

    // The client saw the start of the answer while the agent was still writing it.
    expect(releasedBy).toBe('client');
    const got = events(text);
    expect(got.at(-1)).toEqual([
      'done',
      expect.objectContaining({
        taskId: accepted.taskId,
        reply: expect.objectContaining({ content: `you said: ${question}` }),
      }),
    ]);
    expect(
      got
        .filter(([e]) => e === 'delta')
        .map(([, d]) => d.text)
        .join(''),
    ).toBe(`you said: ${question}`);
  });
});
