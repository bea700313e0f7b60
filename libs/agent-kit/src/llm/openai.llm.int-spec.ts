import { Logger } from '@nestjs/common';
import { redactPii } from '@loom/security';
import { FakeOpenAiServer, FakeResponder } from '@loom/testing';
import { MAX_ANSWER_CHARS } from '../contracts/agent-messages';
import { LlmError, LlmRefusal, LlmStream } from './llm.types';
import { OpenAiLlmClient, OpenAiLlmOptions } from './openai.llm';
import { countMessageTokens, countTokens } from './token-counter';

const KEY = 'sk-int-SECRET-9876543210fedcba';
const req = {
  purpose: 'answer' as const,
  messages: [
    { role: 'system' as const, content: 'You are a labour-law specialist.' },
    { role: 'user' as const, content: '试用期被辞退有补偿吗' },
  ],
};

/** The real `openai` client over HTTP against an OpenAI-compatible server on a local port. */
describe('OpenAiLlmClient against an OpenAI-compatible endpoint', () => {
  let server: FakeOpenAiServer;
  const client = (opts: Partial<OpenAiLlmOptions> = {}) =>
    new OpenAiLlmClient({ apiKey: KEY, model: 'fake-model', baseUrl: server.baseUrl, ...opts });
  const answer = (responder: FakeResponder) => server.respondWith(responder);
  /** The deltas a stream yields, and what it fails with (undefined when it ends well). */
  const drain = async (stream: LlmStream) => {
    const deltas: string[] = [];
    const error = await (async () => {
      for await (const delta of stream.deltas) deltas.push(delta);
    })().catch((e: unknown) => e);
    return { deltas, error };
  };
  /** What a call fails with, asked as a completion and as a stream. */
  const failuresBothWays = async () => [
    await client()
      .complete(req)
      .catch((e: unknown) => e),
    await client()
      .stream(req)
      .result.catch((e: unknown) => e),
  ];

  beforeEach(async () => {
    server = await FakeOpenAiServer.start(() => ({ text: 'hello' }));
  });
  afterEach(() => server.close());

  it('sends the key, model and messages, and records the usage the provider reports', async () => {
    answer(() => ({ text: '有，视情况而定', usage: { prompt_tokens: 31, completion_tokens: 7 } }));
    const result = await client().complete({ ...req, maxTokens: 64, temperature: 0 });
    expect(result).toEqual({
      text: '有，视情况而定',
      model: 'fake-model',
      usage: { promptTokens: 31, completionTokens: 7 },
    });
    expect(server.received).toHaveLength(1);
    expect(server.received[0]).toMatchObject({
      authorization: `Bearer ${KEY}`,
      model: 'fake-model',
      stream: true, // streamed from the provider, collected
      messages: req.messages,
      body: { max_tokens: 64, temperature: 0 },
    });
  });

  it('prices the usage when the model has prices', async () => {
    answer(() => ({ text: 'priced', usage: { prompt_tokens: 31, completion_tokens: 7 } }));
    const prices = { promptUsdPerMTok: 2.5, completionUsdPerMTok: 10 };
    const result = await client({ prices }).complete(req);
    expect(result.usage).toEqual({
      promptTokens: 31,
      completionTokens: 7,
      costUsd: (31 * 2.5 + 7 * 10) / 1_000_000,
    });
  });

  it('streams the deltas in order and takes the usage from the final chunk', async () => {
    answer(() => ({
      chunks: ['试用期', '被辞退', '有补偿'],
      usage: { prompt_tokens: 40, completion_tokens: 9 },
    }));
    const stream = client().stream(req);
    const deltas: string[] = [];
    for await (const delta of stream.deltas) deltas.push(delta);
    expect(deltas).toEqual(['试用期', '被辞退', '有补偿']);
    expect(await stream.result).toEqual({
      text: '试用期被辞退有补偿',
      model: 'fake-model',
      usage: { promptTokens: 40, completionTokens: 9 },
    });
    expect(server.received[0]).toMatchObject({ stream: true, includeUsage: true });
  });

  it('counts tokens itself when the endpoint reports no usage', async () => {
    answer(() => ({ chunks: ['no ', 'usage'], usage: null }));
    const streamed = await client().stream(req).result;
    answer(() => ({ text: 'no usage', usage: null }));
    const completed = await client().complete(req);
    const own = { promptTokens: countMessageTokens(req.messages), completionTokens: 0 };
    own.completionTokens = countTokens('no usage');
    expect(streamed.usage).toEqual(own);
    expect(completed.usage).toEqual(own);
  });

  it('streams from an endpoint that refuses stream_options, and stops asking it', async () => {
    answer((received) =>
      received.includeUsage
        ? { status: 400, errorMessage: 'Unrecognized request argument supplied: stream_options' }
        : { chunks: ['不支持', '用量'] },
    );
    const llm = client();
    const first = llm.stream(req);
    const deltas: string[] = [];
    for await (const delta of first.deltas) deltas.push(delta);
    expect(deltas).toEqual(['不支持', '用量']);
    expect((await first.result).usage).toEqual({
      promptTokens: countMessageTokens(req.messages),
      completionTokens: countTokens('不支持用量'),
    });
    expect((await llm.stream(req).result).text).toBe('不支持用量');
    expect(server.received.map((r) => r.includeUsage)).toEqual([true, false, false]);
  });

  it('asks a reasoning model without the max_tokens and temperature it refuses, once each', async () => {
    // OpenAI's o-series and gpt-5 answer 400 to both, with these messages.
    answer((received) =>
      'max_tokens' in received.body
        ? {
            status: 400,
            errorParam: 'max_tokens',
            errorCode: 'unsupported_parameter',
            errorMessage:
              "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
          }
        : 'temperature' in received.body
          ? {
              status: 400,
              errorParam: 'temperature',
              errorCode: 'unsupported_value',
              errorMessage:
                "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported.",
            }
          : { text: '{"intent":"labor"}' },
    );
    const llm = client();
    const planned = { ...req, purpose: 'plan' as const, maxTokens: 200, temperature: 0 };
    expect((await llm.complete(planned)).text).toBe('{"intent":"labor"}');
    expect((await llm.complete(planned)).text).toBe('{"intent":"labor"}');
    const sent = server.received.map((r) =>
      ['max_tokens', 'temperature'].filter((k) => k in r.body),
    );
    expect(sent).toEqual([['max_tokens', 'temperature'], ['temperature'], [], []]);
  });

  it('does not take another 400 for a refused option', async () => {
    answer(() => ({ status: 400, errorMessage: "Invalid value for 'temperature'" }));
    const error = await client()
      .stream(req)
      .result.catch((e: unknown) => e);
    expect((error as LlmError).status).toBe(400);
    expect(server.received).toHaveLength(1);
  });

  it("does not give up an option for a 400 whose words merely quote the user's input", async () => {
    const question =
      "Why is 'max_tokens' not supported? Use max_completion_tokens, or is stream_options unsupported?";
    const asked = {
      ...req,
      messages: [{ role: 'user' as const, content: question }],
      maxTokens: 64,
    };
    // A 400 about the content (OpenAI names it in `param`), and one from a server that names
    // nothing, both quoting the question.
    for (const errorParam of ['messages', undefined]) {
      answer((_, n) =>
        n === 1
          ? { status: 400, errorParam, errorMessage: `Invalid content '${question}': flagged` }
          : { text: 'ok' },
      );
      server.received.length = 0;
      const llm = client({ maxRetries: 0 });
      const error = await llm.complete(asked).catch((e: unknown) => e);
      expect((error as LlmError).status).toBe(400);
      await llm.complete(req); // another user's call, on the same process
      await llm.complete(asked);
      const sent = server.received.map((r) => ['max_tokens' in r.body, r.includeUsage]);
      expect([errorParam, sent]).toEqual([
        errorParam,
        [
          [true, true],
          [false, true],
          [true, true],
        ],
      ]);
    }
  });

  it('retries a 429 as the provider asks and then answers', async () => {
    answer((_, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after-ms': '20' } } : { text: 'after retry' },
    );
    const result = await client({ maxRetries: 2 }).complete(req);
    expect(result.text).toBe('after retry');
    expect(server.received).toHaveLength(2);
  });

  it('gives up after maxRetries with a typed error that carries the status but not the key', async () => {
    answer(() => ({ status: 500, headers: { 'retry-after-ms': '10' } }));
    const error = await client({ maxRetries: 1 })
      .complete(req)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).status).toBe(500);
    expect((error as LlmError).message).toMatch(/^LLM answer request failed \(HTTP 500\)/);
    expect((error as LlmError).message).not.toContain(KEY);
    expect(server.received).toHaveLength(2); // the first attempt and one retry
  });

  it('does not retry a rejected key', async () => {
    answer(() => ({ status: 401 }));
    const error = await client({ maxRetries: 2 })
      .complete(req)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).status).toBe(401);
    expect(server.received).toHaveLength(1);
  });

  it.each([
    [401, 'Incorrect API key', "the model endpoint refused Loom's API key (HTTP 401)"],
    [403, 'Forbidden', "the model endpoint refused Loom's API key (HTTP 403)"],
    [
      404,
      'The model `gpt-x` does not exist',
      'the model endpoint has no such model or path (LLM_MODEL, OPENAI_BASE_URL) (HTTP 404)',
    ],
    [
      400,
      "This model's maximum context length is 8192 tokens",
      "the prompt is longer than the model's context (HTTP 400)",
    ],
    [400, "Invalid value for 'temperature'", 'the model call failed (HTTP 400)'],
  ])(
    "says what an HTTP %i means for the operator, never in the provider's words",
    async (status, errorMessage, says) => {
      answer(() => ({ status, errorMessage }));
      const error = await client({ maxRetries: 0 })
        .complete(req)
        .catch((e: unknown) => e);
      expect((error as LlmError).publicMessage).toBe(says);
      expect((error as LlmError).status).toBe(status);
    },
  );

  it('says so when the endpoint cannot be reached at all, after its retries', async () => {
    const closed = await FakeOpenAiServer.start(() => ({ text: 'never' }));
    const baseUrl = closed.baseUrl;
    await closed.close(); // nothing listens on its port now
    const error = await client({ baseUrl, maxRetries: 1 })
      .complete(req)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).publicMessage).toBe(
      'the model endpoint could not be reached (ECONNREFUSED; OPENAI_BASE_URL)',
    );
    expect((error as LlmError).message).not.toContain(KEY);
  });

  it('does not blame the configuration for an endpoint that was reached and cut the connection', async () => {
    answer(() => ({ resetBeforeHeaders: true }));
    const error = await client({ maxRetries: 1 })
      .complete(req)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).publicMessage).toMatch(
      /^the model endpoint closed the connection before it answered \((ECONNRESET|UND_ERR_SOCKET)\)$/,
    );
    expect(server.received).toHaveLength(2); // asked again, like any connection error
  });

  it('ends a call that outlives its time-out with a typed error', async () => {
    answer(() => ({ text: 'too late', delayMs: 3_000 }));
    const error = await client({ timeoutMs: 200, maxRetries: 0 })
      .complete(req)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    // "the model call timed out" in Node; under Jest the SDK sees its abort from another realm
    // and reports a connection error instead. Either way: typed, no status, one attempt.
    expect((error as LlmError).message).toMatch(/timed out|Connection error/);
    expect((error as LlmError).status).toBeUndefined();
    expect(server.received).toHaveLength(1);
  });

  it("ends a call that hangs when the caller's signal aborts, with the signal's reason", async () => {
    answer(() => ({ text: 'never sent', delayMs: 60_000 }));
    const caller = new AbortController();
    const reason = new Error('the execution was cancelled');
    const call = client({ timeoutMs: 60_000, maxRetries: 0 })
      .complete({ ...req, signal: caller.signal })
      .catch((e: unknown) => e);
    while (server.received.length === 0) await new Promise((r) => setTimeout(r, 10));

    caller.abort(reason);

    expect(await call).toBe(reason);
    expect(server.received).toHaveLength(1);
  });

  it("ends a stream that stalls mid-answer when the caller's signal aborts, after the text sent", async () => {
    answer(() => ({ chunks: ['说到一半', '再也没有'], stallAfterChunks: 1 }));
    const caller = new AbortController();
    const reason = new Error('the execution was cancelled');
    const stream = client({ timeoutMs: 60_000, maxRetries: 0 }).stream({
      ...req,
      signal: caller.signal,
    });
    const deltas: string[] = [];
    const drained = (async () => {
      for await (const delta of stream.deltas) {
        deltas.push(delta);
        caller.abort(reason);
      }
    })().catch((e: unknown) => e);

    expect(await drained).toBe(reason);
    expect(deltas).toEqual(['说到一半']);
    expect(await stream.result.catch((e: unknown) => e)).toBe(reason);
  });

  it('ends a call whose answer stalls after its headers: silence ends it', async () => {
    answer(() => ({ chunks: ['never sent'], stallAfterChunks: 0 }));
    const error = await client({ timeoutMs: 200, maxRetries: 0 })
      .complete(req)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).publicMessage).toBe('the model call timed out');
  });

  it('ends a stream that falls silent mid-answer, after the text it did send', async () => {
    answer(() => ({ chunks: ['说到一半', '再也没有'], stallAfterChunks: 1 }));
    const stream = client({ timeoutMs: 300, maxRetries: 0 }).stream(req);
    const { deltas, error } = await drain(stream);
    expect(deltas).toEqual(['说到一半']);
    expect((error as LlmError).publicMessage).toBe('the model call timed out');
  });

  // A sign of life every 100 ms against 500 ms of silence: a loaded machine's stall of this
  // one process (server and client alike) must pass 400 ms to end a stream that keeps sending.
  it('lets a stream that keeps sending run past the deadline for its start', async () => {
    const chunks = Array.from({ length: 12 }, (_, i) => `第${i + 1}段`);
    answer(() => ({ chunks, chunkIntervalMs: 100 })); // 1200 ms, the deadline is 1000 ms
    const result = await client({ timeoutMs: 500, maxRetries: 0 }).stream(req).result;
    expect(result.text).toBe(chunks.join(''));
  });

  it('lets a reasoning model think past the time-out while it streams its reasoning', async () => {
    const reasoning = Array.from({ length: 12 }, (_, i) => `思考${i}`);
    answer(() => ({ reasoning, reasoningIntervalMs: 100, text: '结论' })); // 1200 ms of thought
    const llm = client({ timeoutMs: 500, maxRetries: 0 }); // silence: 500 ms, a start: 1000 ms
    expect((await llm.stream(req).result).text).toBe('结论');
    expect((await llm.complete(req)).text).toBe('结论'); // streamed from the provider too
    expect(server.received.map((r) => r.stream)).toEqual([true, true]);
  });

  it('counts SSE keep-alive comments as a sign of life', async () => {
    answer(() => ({ keepAlives: 12, text: 'queued, then answered' })); // 1200 ms of comments
    const result = await client({ timeoutMs: 500, maxRetries: 0 }).stream(req).result;
    expect(result.text).toBe('queued, then answered');
  });

  it("answers with the provider's 429 when the pause it asks for would end past the deadline", async () => {
    answer(() => ({ status: 429, headers: { 'retry-after': '30' } }));
    const error = await client({ timeoutMs: 200, maxRetries: 2 })
      .complete(req)
      .catch((e: unknown) => e);
    expect((error as LlmError).status).toBe(429);
    expect((error as LlmError).publicMessage).toBe(
      'the model endpoint is busy (rate limited or overloaded): retry later (HTTP 429)',
    );
    expect((error as LlmError).busy).toBe(true);
    expect((error as LlmError).retryAfterS).toBe(30); // for the client, who should wait as much
    expect(server.received).toHaveLength(1);
  });

  it('does not take a pause that leaves the next attempt less than its time-out', async () => {
    // The deadline: 200 ms × 2 attempts + 200 ms of pauses. A pause of 550 ms would leave the
    // second attempt 50 ms, too little for an answer that takes 100: the 429 is the answer.
    answer((_, n) =>
      n === 1
        ? { status: 429, headers: { 'retry-after-ms': '550' } }
        : { text: 'too late', delayMs: 100 },
    );
    const error = await client({ timeoutMs: 200, maxRetries: 1 })
      .complete(req)
      .catch((e: unknown) => e);
    expect((error as LlmError).publicMessage).toBe(
      'the model endpoint is busy (rate limited or overloaded): retry later (HTTP 429)',
    );
    expect(server.received).toHaveLength(1);
  });

  it('tells a quota used up (429 insufficient_quota) from a rate limit: no retry helps it', async () => {
    answer(() => ({
      status: 429,
      errorCode: 'insufficient_quota',
      errorMessage: 'You exceeded your current quota, please check your plan and billing details.',
    }));
    const error = await client({ maxRetries: 0 })
      .complete(req)
      .catch((e: unknown) => e);
    expect((error as LlmError).publicMessage).toBe(
      "the model endpoint's quota for Loom's key is used up (HTTP 429)",
    );
    expect((error as LlmError).busy).toBe(false);
  });

  it('counts tokens itself when the endpoint reports zero tokens for a prompt and an answer', async () => {
    answer(() => ({ chunks: ['有', '补偿'], usage: { prompt_tokens: 0, completion_tokens: 0 } }));
    const own = {
      promptTokens: countMessageTokens(req.messages),
      completionTokens: countTokens('有补偿'),
    };
    expect((await client().complete(req)).usage).toEqual(own);
    expect((await client().stream(req).result).usage).toEqual(own);
  });

  it('counts tokens itself when the endpoint reports counts that are not counts', async () => {
    answer(() => ({ text: 'odd', usage: { prompt_tokens: '12', completion_tokens: -3 } as any }));
    const result = await client().complete(req);
    expect(result.usage).toEqual({
      promptTokens: countMessageTokens(req.messages),
      completionTokens: countTokens('odd'),
    });
  });

  it('counts tokens itself when the endpoint reports counts no call can have', async () => {
    // Past 100M tokens a call: a buggy server's figure, which the orchestrator would refuse
    // whole (the call then counted as free) or, for the planner's call, add to the totals.
    answer(() => ({ text: 'odd', usage: { prompt_tokens: 9e15, completion_tokens: 100_000_001 } }));
    const prices = { promptUsdPerMTok: 2.5, completionUsdPerMTok: 10 };
    const result = await client({ prices }).complete(req);
    const own = {
      promptTokens: countMessageTokens(req.messages),
      completionTokens: countTokens('odd'),
    };
    expect(result.usage).toEqual({
      ...own,
      costUsd: (own.promptTokens * 2.5 + own.completionTokens * 10) / 1_000_000,
    });
  });

  it.each([
    ['length', "the model's answer was cut off at its token limit"],
    ['content_filter', "the model's answer was withheld by its content filter"],
  ])(
    'fails an answer that ended with finish_reason %s, with what it cost',
    async (reason, says) => {
      const usage = { prompt_tokens: 50, completion_tokens: 4096 };
      answer(() => ({ chunks: ['写到', '一半'], finishReason: reason, usage }));
      for (const error of await failuresBothWays()) {
        expect(error).toBeInstanceOf(LlmError);
        expect((error as LlmError).publicMessage).toBe(says);
        expect((error as LlmError).usage).toEqual({ promptTokens: 50, completionTokens: 4096 });
      }
    },
  );

  it.each([
    ['model_length', "the model's answer was cut off at its token limit"], // Mistral: the context
    ['max_tokens', "the model's answer was cut off at its token limit"], // Anthropic's name
    ['error', "the model's answer broke off"], // Mistral, OpenRouter: generation failed
    ['abort', "the model's answer broke off"], // vLLM: the request was aborted
  ])(
    'does not take an answer that ended with finish_reason %s as a whole one',
    async (reason, says) => {
      answer(() => ({ chunks: ['写到', '一半'], finishReason: reason }));
      for (const error of await failuresBothWays()) {
        expect(error).toBeInstanceOf(LlmError);
        expect((error as LlmError).publicMessage).toBe(says);
        expect((error as LlmError).usage?.completionTokens).toBeGreaterThan(0);
      }
    },
  );

  it('stops reading an answer longer than any answer Loom takes, and counts what it cost', async () => {
    // A model in a loop, or a proxy that never ends: 2M characters, which an agent's answer
    // could never be (MAX_ANSWER_CHARS), read to the end, held whole and paid for all along.
    const chunks = Array.from({ length: 2_000 }, () => 'x'.repeat(1_000));
    answer(() => ({ chunks }));
    const stream = client({ maxRetries: 0 }).stream(req);
    const { deltas, error } = await drain(stream);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).publicMessage).toBe(
      `the model's answer was longer than Loom takes (${MAX_ANSWER_CHARS} characters)`,
    );
    const read = deltas.join('').length;
    expect(read).toBeGreaterThan(MAX_ANSWER_CHARS);
    expect(read).toBeLessThan(chunks.length * 1_000);
    expect((error as LlmError).usage?.completionTokens).toBe(countTokens(deltas.join('')));
    expect(server.received).toHaveLength(1);
  });

  it('fails a stream that ends cleanly before its finish_reason, after the text it sent', async () => {
    answer(() => ({ chunks: ['one ', 'two ', 'three'], endAfterChunks: 1 }));
    const stream = client({ maxRetries: 0 }).stream(req);
    const { deltas, error } = await drain(stream);
    expect(deltas).toEqual(['one ']);
    expect((error as LlmError).publicMessage).toBe("the model's answer broke off");
    expect((error as LlmError).usage?.completionTokens).toBe(countTokens('one '));
  });

  it('takes a whole chat completion from an endpoint that does not stream', async () => {
    // A proxy or server that ignores `stream: true` and answers with one JSON completion.
    const completion = {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 0,
      model: 'fake-model-0613',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: '有，视情况而定' },
          finish_reason: 'stop',
        },
      ],
      usage: { prompt_tokens: 31, completion_tokens: 7, total_tokens: 38 },
    };
    const body = JSON.stringify(completion);
    answer(() => ({ rawBody: { status: 200, contentType: 'application/json', body } }));
    const whole = {
      text: '有，视情况而定',
      model: 'fake-model-0613',
      usage: { promptTokens: 31, completionTokens: 7 },
    };
    expect(await client().complete(req)).toEqual(whole);
    const stream = client().stream(req);
    expect(await drain(stream)).toEqual({ deltas: ['有，视情况而定'], error: undefined });
    expect(await stream.result).toEqual(whole);
    // Cut off at its token limit, it is that failure, not one that broke off.
    const cut = { ...completion, choices: [{ ...completion.choices[0], finish_reason: 'length' }] };
    answer(() => ({
      rawBody: { status: 200, contentType: 'application/json', body: JSON.stringify(cut) },
    }));
    for (const error of await failuresBothWays())
      expect((error as LlmError).publicMessage).toBe(
        "the model's answer was cut off at its token limit",
      );
  });

  it.each([
    ['truncated JSON', 'application/json', '{"choices": ['],
    ['JSON that is not a completion', 'application/json', '{"ok": true}'],
    ['an HTML page', 'text/html; charset=utf-8', '<html>login</html>'],
  ])('says a 200 with %s is a malformed answer, not one that broke off', async (_, type, body) => {
    answer(() => ({ rawBody: { status: 200, contentType: type, body } }));
    for (const error of await failuresBothWays())
      expect((error as LlmError).publicMessage).toBe('the model endpoint sent a malformed answer');
  });

  it("logs a malformed stream chunk through Loom's logger, not the SDK's console", async () => {
    // The SDK prints a chunk it cannot parse with console.error: raw model output on stderr,
    // past the JSON log lines and their PII redaction.
    const consoleLines = (['error', 'warn', 'info', 'log', 'debug'] as const).map((level) =>
      jest.spyOn(console, level).mockImplementation(() => undefined),
    );
    const logged = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      const body = `data: {"choices": [{"delta": {"content": "mail alice@example.com"\n\n`;
      answer(() => ({ rawBody: { status: 200, contentType: 'text/event-stream', body } }));
      const error = await client()
        .complete(req)
        .catch((e: unknown) => e);
      expect((error as LlmError).publicMessage).toBe('the model endpoint sent a malformed answer');
      expect(consoleLines.flatMap((spy) => spy.mock.calls)).toEqual([]);
      expect(logged).toHaveBeenCalled();
    } finally {
      consoleLines.forEach((spy) => spy.mockRestore());
      logged.mockRestore();
    }
  });

  // The SDK's line was cut to its 500 characters before the logger redacted it: a phone number
  // or email across the cut was left as a fragment the redaction no longer recognises.
  it('cuts a long SDK log line where no PII is split, for the logger to redact whole', async () => {
    const logged = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    try {
      for (let pad = 400; pad < 446; pad += 2) {
        logged.mockClear();
        const content = `${'x'.repeat(pad)} call 13987654321 or mail zhang.wei@example.com`;
        const body = `data: {"choices": [{"delta": {"content": "${content}"\n\n`;
        answer(() => ({ rawBody: { status: 200, contentType: 'text/event-stream', body } }));
        await client()
          .complete(req)
          .catch(() => undefined);
        const lines = logged.mock.calls.map(([line]) => String(line));
        expect(lines.length).toBeGreaterThan(0);
        for (const line of lines) {
          const written = redactPii(line); // what the logger does with the line it is given
          expect(written).not.toMatch(/139|zhang/);
        }
      }
    } finally {
      logged.mockRestore();
    }
  });

  // The SDK's debug lines (OPENAI_LOG=debug) quote an error body that is not JSON: a provider
  // that echoes the key it refused put a key of no known shape (a local server's) in the logs,
  // where the LlmError's own message masked it.
  it("masks the client's API key in the SDK's log lines, whatever its shape", async () => {
    const key = 'team-gateway-credential';
    const levels = ['log', 'error', 'warn', 'debug', 'verbose'] as const;
    const spies = levels.map((level) =>
      jest.spyOn(Logger.prototype, level).mockImplementation(() => undefined),
    );
    // The SDK reads its log level from OPENAI_LOG alone, when the client is made.
    const env = jest.replaceProperty(process, 'env', { OPENAI_LOG: 'debug' });
    try {
      answer(() => ({
        rawBody: { status: 401, contentType: 'text/plain', body: `invalid key: ${key}` },
      }));
      const error = await client({ apiKey: key, maxRetries: 0 })
        .complete(req)
        .catch((e: unknown) => e);
      expect((error as LlmError).message).not.toContain(key);
      const lines = spies.flatMap((spy) => spy.mock.calls.map(([line]) => String(line)));
      expect(lines.some((line) => line.includes('response error'))).toBe(true);
      for (const line of lines) expect(redactPii(line)).not.toContain(key);
    } finally {
      env.restore();
      spies.forEach((spy) => spy.mockRestore());
    }
  });

  it('fails a stream cut off mid-answer instead of ending it as if complete', async () => {
    answer(() => ({ chunks: ['one ', 'two ', 'three'], cutAfterChunks: 1 }));
    const stream = client({ maxRetries: 0 }).stream(req);
    const { deltas, error } = await drain(stream);
    expect(deltas).toEqual(['one ']);
    expect(error).toBeInstanceOf(LlmError);
    await expect(stream.result).rejects.toBeInstanceOf(LlmError);
  });

  it('says a stream cut off mid-answer broke off, and counts what it cost', async () => {
    answer(() => ({ chunks: ['one ', 'two ', 'three'], cutAfterChunks: 1 }));
    const { deltas, error } = await drain(client({ maxRetries: 2 }).stream(req));
    expect(deltas).toEqual(['one ']);
    expect((error as LlmError).publicMessage).toBe("the model's answer broke off");
    // The prompt was taken and part of the answer produced: the provider bills them.
    expect((error as LlmError).usage).toEqual({
      promptTokens: countMessageTokens(req.messages),
      completionTokens: countTokens('one '),
    });
    expect(server.received).toHaveLength(1); // text was already sent: not asked again
  });

  it('counts what a stream that fell silent mid-answer cost', async () => {
    answer(() => ({ chunks: ['说到一半', '再也没有'], stallAfterChunks: 1 }));
    const { error } = await drain(client({ timeoutMs: 300, maxRetries: 0 }).stream(req));
    expect((error as LlmError).publicMessage).toBe('the model call timed out');
    expect((error as LlmError).usage).toEqual({
      promptTokens: countMessageTokens(req.messages),
      completionTokens: countTokens('说到一半'),
    });
  });

  it('keeps a finished answer whose stream stalls or is cut before its usage chunk', async () => {
    for (const afterFinish of ['stall', 'cut'] as const) {
      answer(() => ({ chunks: ['答案', '完整'], afterFinish }));
      const stream = client({ timeoutMs: 300, maxRetries: 0 }).stream(req);
      const { deltas, error } = await drain(stream);
      // finish_reason `stop` came: the answer is whole, only the provider's count is missing.
      expect([afterFinish, deltas, error]).toEqual([afterFinish, ['答案', '完整'], undefined]);
      expect(await stream.result).toEqual({
        text: '答案完整',
        model: 'fake-model',
        usage: {
          promptTokens: countMessageTokens(req.messages),
          completionTokens: countTokens('答案完整'),
        },
      });
    }
  });

  it('says the model refused, streamed or not, rather than that it answered nothing', async () => {
    answer(() => ({ text: '', refusal: ["I'm sorry, ", 'I cannot help with that.'] }));
    const stream = client().stream(req);
    const { deltas, error } = await drain(stream);
    expect(deltas).toEqual([]); // the refusal is not the answer
    expect(error).toBeInstanceOf(LlmRefusal);
    expect((error as LlmError).publicMessage).toBe('the model refused to answer');
    expect((error as LlmError).usage?.promptTokens).toBeGreaterThan(0);
    const whole = await client()
      .complete(req)
      .catch((e: unknown) => e);
    expect(whole).toBeInstanceOf(LlmRefusal);
  });

  it('does not take a JSON completion with a refusal as an empty answer', async () => {
    answer(() => ({
      rawBody: {
        status: 200,
        contentType: 'application/json',
        body: JSON.stringify({
          id: 'c',
          object: 'chat.completion',
          created: 0,
          model: 'fake-model',
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: null, refusal: 'I cannot help with that.' },
              finish_reason: 'stop',
            },
          ],
        }),
      },
    }));
    const error = await client()
      .complete(req)
      .catch((e: unknown) => e);
    expect((error as LlmError).publicMessage).toBe('the model refused to answer');
  });

  describe('an error event in the stream (OpenRouter, vLLM)', () => {
    const BUSY = 'the model endpoint is busy (rate limited or overloaded): retry later';

    it('retries a busy provider that says so in the stream before any text, then answers', async () => {
      answer((_, n) =>
        n === 1
          ? {
              chunks: ['never'],
              streamError: {
                afterChunks: 0,
                error: { code: 429, message: 'Rate limit exceeded: upstream' },
              },
            }
          : { text: 'after the busy event' },
      );
      const result = await client({ maxRetries: 2 }).stream(req).result;
      expect(result.text).toBe('after the busy event');
      expect(server.received).toHaveLength(2);
    });

    it.each([429, 503, 529])(
      'answers busy for an error event with code %i after the retries',
      async (code) => {
        answer(() => ({
          chunks: ['never'],
          streamError: { afterChunks: 0, error: { code, message: 'Provider overloaded' } },
        }));
        const error = await client({ maxRetries: 1 })
          .stream(req)
          .result.catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LlmError);
        expect((error as LlmError).publicMessage).toBe(`${BUSY} (HTTP ${code})`);
        expect((error as LlmError).busy).toBe(true);
        expect((error as LlmError).status).toBe(code);
        expect(server.received).toHaveLength(2);
      },
    );

    it('answers busy, without asking again, once text was sent, and counts what it cost', async () => {
      answer(() => ({
        chunks: ['半个', '答案'],
        streamError: { afterChunks: 1, error: { code: '503', message: 'overloaded' } },
      }));
      const { deltas, error } = await drain(client({ maxRetries: 2 }).stream(req));
      expect(deltas).toEqual(['半个']);
      expect((error as LlmError).publicMessage).toBe(`${BUSY} (HTTP 503)`);
      expect((error as LlmError).busy).toBe(true);
      expect((error as LlmError).usage).toEqual({
        promptTokens: countMessageTokens(req.messages),
        completionTokens: countTokens('半个'),
      });
      expect(server.received).toHaveLength(1);
    });

    it('says another error event broke the answer off', async () => {
      answer(() => ({
        chunks: ['x'],
        streamError: { afterChunks: 0, error: { code: 500, message: 'boom' } },
      }));
      const error = await client({ maxRetries: 0 })
        .stream(req)
        .result.catch((e: unknown) => e);
      expect((error as LlmError).publicMessage).toBe("the model's answer broke off");
      expect((error as LlmError).busy).toBe(false);
    });
  });
});
