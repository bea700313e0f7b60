import { OpenAiLlmClient, type ChatCompletionsApi } from './openai.llm';

/**
 * Two calls in flight when the endpoint first refuses max_tokens: both were sent with it, both
 * get the 400. The one that learns second must ask again without it too, not fail the call.
 */
describe('OpenAiLlmClient: concurrent calls to a model that refuses max_tokens', () => {
  it('asks every call that sent the refused option again without it', async () => {
    const sent: any[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const api = {
      chat: {
        completions: {
          create: async (params: any) => {
            sent.push(params);
            if ('max_tokens' in params) {
              await gate; // both first attempts are on the wire before either is refused
              throw Object.assign(
                new Error(
                  "400 Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                ),
                { status: 400, param: 'max_tokens' },
              );
            }
            return (async function* () {
              yield { model: 'o3', choices: [{ delta: { content: 'ok' }, finish_reason: 'stop' }] };
            })();
          },
        },
      },
    } as unknown as ChatCompletionsApi;
    const client = new OpenAiLlmClient({ apiKey: 'sk-x', model: 'o3' }, api);
    const req = {
      purpose: 'plan' as const,
      messages: [{ role: 'user' as const, content: 'hi' }],
      maxTokens: 64,
    };
    const calls = [client.complete(req), client.complete(req)];
    await new Promise((r) => setImmediate(r));
    release();
    const results = await Promise.allSettled(calls);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
    expect(sent.map((p) => 'max_tokens' in p)).toEqual([true, true, false, false]);
  });
});
