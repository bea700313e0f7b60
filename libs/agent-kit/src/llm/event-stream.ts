/**
 * A 2xx answer as the event stream the SDK parses. Loom always asks for one, but an endpoint
 * that ignores `stream: true` (a proxy, an older server) answers with one JSON chat completion:
 * that is sent on as the stream's one chunk, with its finish_reason and usage. A 2xx that is
 * neither a stream nor a completion (an HTML login page, broken JSON, JSON of something else)
 * fails as its body is read with a SyntaxError: the endpoint sent a malformed answer, rather
 * than an empty stream that would read as an answer that broke off.
 */
export async function asEventStream(res: Response): Promise<Response> {
  const type = res.headers.get('content-type') ?? '';
  if (!/json|^\s*text\/html/i.test(type)) return res; // an event stream, or nothing said: as is
  const text = await res.text();
  const sse = /^\s*(data|event|id|retry)?:/.test(text); // a stream all the same, mislabelled
  const chunk = sse || /html/i.test(type) ? undefined : chunkOf(text);
  const body = sse
    ? text
    : chunk
      ? `data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`
      : new ReadableStream<Uint8Array>({
          start: (controller) =>
            controller.error(new SyntaxError(`a ${type} answer that is no chat completion`)),
        });
  const headers = new Headers(res.headers);
  headers.set('content-type', 'text/event-stream');
  headers.delete('content-length');
  return new Response(body, { status: res.status, statusText: res.statusText, headers });
}

interface WireChoice {
  index?: unknown;
  message?: { role?: unknown; content?: unknown; refusal?: unknown };
  finish_reason?: unknown;
}

/** A chat completion's JSON as one `chat.completion.chunk`; undefined when it is none. */
function chunkOf(text: string): Record<string, unknown> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const completion = value as { choices?: unknown; usage?: unknown; model?: unknown } | null;
  const choices = completion?.choices;
  if (
    !Array.isArray(choices) ||
    !choices.every((c: WireChoice | null) => typeof c?.message === 'object' && c.message !== null)
  )
    return undefined;
  return {
    ...completion,
    object: 'chat.completion.chunk',
    choices: (choices as WireChoice[]).map((c, i) => ({
      index: c.index ?? i,
      delta: {
        role: 'assistant',
        content: c.message?.content ?? null,
        ...(c.message?.refusal ? { refusal: c.message.refusal } : {}),
      },
      finish_reason: c.finish_reason ?? null,
    })),
  };
}
