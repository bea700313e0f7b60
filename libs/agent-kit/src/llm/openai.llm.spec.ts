import { createLlmClient } from './llm.factory';
import { LlmError } from './llm.types';
import { OpenAiLlmClient, type ChatCompletionsApi } from './openai.llm';

const KEY = 'sk-test-SECRET-0123456789abcdef';
const req = { purpose: 'answer' as const, messages: [{ role: 'user' as const, content: 'hi' }] };

function fakeApi(create: (params: any) => unknown): { api: ChatCompletionsApi; calls: any[] } {
  const calls: any[] = [];
  const api = {
    chat: {
      completions: {
        create: (params: any) => {
          calls.push(params);
          return create(params);
        },
      },
    },
  } as unknown as ChatCompletionsApi;
  return { api, calls };
}

describe('OpenAiLlmClient', () => {
  it('completes (from a stream) and records the provider usage', async () => {
    const { api, calls } = fakeApi(async () =>
      (async function* () {
        yield { model: 'gpt-x', choices: [{ delta: { content: 'hello' }, finish_reason: 'stop' }] };
        yield { model: 'gpt-x', choices: [], usage: { prompt_tokens: 7, completion_tokens: 2 } };
      })(),
    );
    const client = new OpenAiLlmClient({ apiKey: KEY, model: 'gpt-x' }, api);
    const result = await client.complete({ ...req, maxTokens: 50, temperature: 0 });
    expect(result).toEqual({
      text: 'hello',
      model: 'gpt-x',
      usage: { promptTokens: 7, completionTokens: 2 },
    });
    expect(calls[0]).toMatchObject({
      model: 'gpt-x',
      max_tokens: 50,
      temperature: 0,
      stream: true, // collected from a stream: see complete()
    });
  });

  it('streams deltas and takes usage from the final chunk', async () => {
    const { api, calls } = fakeApi(async () =>
      (async function* () {
        yield { model: 'gpt-x', choices: [{ delta: { content: 'Hel' } }] };
        yield { model: 'gpt-x', choices: [{ delta: { content: 'lo' }, finish_reason: 'stop' }] };
        yield { model: 'gpt-x', choices: [], usage: { prompt_tokens: 9, completion_tokens: 3 } };
      })(),
    );
    const stream = new OpenAiLlmClient({ apiKey: KEY, model: 'gpt-x' }, api).stream(req);
    const deltas: string[] = [];
    for await (const delta of stream.deltas) deltas.push(delta);
    expect(deltas).toEqual(['Hel', 'lo']);
    expect((await stream.result).usage).toEqual({ promptTokens: 9, completionTokens: 3 });
    expect(calls[0]).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it('turns provider errors into LlmErrors that never include the key', async () => {
    const failure = Object.assign(new Error(`401 Incorrect API key provided: ${KEY}.`), {
      status: 401,
    });
    const { api } = fakeApi(async () => {
      throw failure;
    });
    const client = new OpenAiLlmClient({ apiKey: KEY, model: 'gpt-x' }, api);
    const error = await client.complete(req).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LlmError);
    expect((error as LlmError).status).toBe(401);
    expect((error as Error).message).not.toContain('SECRET');
    const stream = client.stream(req);
    await expect(stream.result).rejects.toThrow(/HTTP 401/);
    await expect(stream.result).rejects.not.toThrow(/SECRET/);
  });

  it("passes the caller's signal to the SDK's request and rejects with its reason", async () => {
    const sent: AbortSignal[] = [];
    const api = {
      chat: {
        completions: {
          // A provider that never answers: only the request's signal ends the call.
          create: (_params: unknown, options: { signal: AbortSignal }) => {
            sent.push(options.signal);
            return new Promise((_resolve, reject) =>
              options.signal.addEventListener('abort', () => reject(new Error('aborted'))),
            );
          },
        },
      },
    } as unknown as ChatCompletionsApi;
    const caller = new AbortController();
    const client = new OpenAiLlmClient({ apiKey: KEY, model: 'gpt-x', timeoutMs: 60_000 }, api);
    const call = client.complete({ ...req, signal: caller.signal }).catch((e: unknown) => e);
    const reason = new Error('the execution was cancelled');

    caller.abort(reason);

    expect(await call).toBe(reason);
    expect(sent).toHaveLength(1);
    expect(sent[0].aborted).toBe(true);
  });

  it('sends nothing for a signal that has already aborted', async () => {
    const { api, calls } = fakeApi(async () => {
      throw new Error('not to be called');
    });
    const reason = new Error('cancelled before the call');
    const client = new OpenAiLlmClient({ apiKey: KEY, model: 'gpt-x' }, api);

    const error = await client
      .stream({ ...req, signal: AbortSignal.abort(reason) })
      .result.catch((e: unknown) => e);

    expect(error).toBe(reason);
    expect(calls).toHaveLength(0);
  });
});

describe('createLlmClient', () => {
  it('builds the offline client by default settings', () => {
    expect(createLlmClient({ provider: 'offline' }).provider).toBe('offline');
  });

  it('requires a key and a model for openai', () => {
    expect(() => createLlmClient({ provider: 'openai', model: 'm' })).toThrow(/OPENAI_API_KEY/);
    expect(() => createLlmClient({ provider: 'openai', apiKey: KEY })).toThrow(/LLM_MODEL/);
    expect(createLlmClient({ provider: 'openai', apiKey: KEY, model: 'm' }).provider).toBe(
      'openai',
    );
  });
});
