import { FakeOpenAiServer } from '@loom/testing';
import { RunningSystem } from './system';
import { contiguous, logLines, storedMessages, waitFor } from './faults.support';
import { orchestratorOn, startReplicas } from './handover.support';
import { startOrchestrator } from './rolling.support';
const { stopAll } = require('../scripts/lib/processes');

const HANDOVER_MS = 1500;
const CHUNKS = Array.from({ length: 8 }, (_, i) => `第${i + 1}段劳动法分析。`);
/** The specialist's model writes one chunk this often: the answer takes 8 × this. */
const CHUNK_MS = 700;
const CONTENT = '我跟公司签的劳动合同有问题';

interface SseEvent {
  event: string;
  data: any;
  at: number;
}

/** A streamed turn's events as they arrive; `onEvent` sees each one. */
async function streamEvents(
  url: string,
  token: string,
  content: string,
  key: string,
  onEvent: (e: SseEvent, all: SseEvent[]) => void = () => undefined,
): Promise<{ status: number; events: SseEvent[] }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      authorization: `Bearer ${token}`,
      'idempotency-key': key,
    },
    body: JSON.stringify({ content }),
  });
  const events: SseEvent[] = [];
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffered.indexOf('\n\n')) >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      // A comment (`: keep-alive`) is no event.
      if (block.split('\n').every((line) => line.startsWith(':'))) continue;
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      const data = JSON.parse(/^data: (.*)$/m.exec(block)?.[1] ?? 'null');
      const e = { event, data, at: Date.now() };
      events.push(e);
      onEvent(e, events);
    }
  }
  return { status: res.status, events };
}

/**
 * A streamed turn (`Accept: text/event-stream`) whose orchestrator is stopped while the
 * specialist's model is still writing: the client has the deltas sent so far, then an `error`
 * event (503 UNAVAILABLE) and no `done`; the half answer is not stored. Another replica finishes
 * the task, the model is not asked again, and the retry with the same Idempotency-Key streams the
 * stored answer once and ends with its TurnView.
 */
describe('system: a streamed turn whose orchestrator is stopped mid-answer', () => {
  let sys: RunningSystem;
  let model: FakeOpenAiServer;
  let ports: number[];

  beforeAll(async () => {
    model = await FakeOpenAiServer.start(() => ({ chunks: CHUNKS, chunkIntervalMs: CHUNK_MS }));
    ({ sys, ports } = await startReplicas({
      replicas: 2,
      env: { SHUTDOWN_HANDOVER_MS: String(HANDOVER_MS) },
      appEnv: {
        'labor-law-agent': {
          LLM_PROVIDER: 'openai',
          OPENAI_BASE_URL: model.baseUrl,
          OPENAI_API_KEY: 'sk-fake-streaming-handover',
          LLM_MODEL: 'fake-model',
        },
      },
    }));
  });
  afterAll(async () => {
    await sys?.stop();
    await model?.close();
  });

  const on = (port: number) => orchestratorOn(sys, port);

  it('ends the stream with error 503 after the deltas sent; the retry streams the stored answer once', async () => {
    const token = sys.token('tenant-s1', 'alice');
    const created = await fetch(`${sys.base}/v1/conversations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: '{}',
    });
    const { conversationId } = (await created.json()) as { conversationId: string };
    const path = `/v1/conversations/${conversationId}/messages`;
    const stopping = on(ports[0]);
    let stoppedAt = 0;
    let stopped: Promise<void> | null = null;
    let storedAtError: Awaited<ReturnType<typeof storedMessages>> | null = null;
    let errorSeen: Promise<void> = Promise.resolve();
    const first = await streamEvents(sys.base + path, token, CONTENT, 'stream-1', (e) => {
      // The first words of the answer are on the screen: stop this orchestrator now.
      if (e.event === 'delta' && !stopped) {
        stoppedAt = Date.now();
        stopped = stopAll([stopping], 'SIGTERM', 10_000);
      }
      if (e.event === 'error')
        errorSeen = storedMessages(sys.env.MYSQL_URL, conversationId).then((m) => {
          storedAtError = m;
        });
    });
    await errorSeen;
    await stopped;
    sys.children = sys.children.filter((c) => c !== stopping);
    try {
      const taskId = logLines(sys, 'labor-law-agent', 'executing', { conversationId })[0]
        ?.taskId as string;
      const retried = await streamEvents(
        `http://127.0.0.1:${ports[1]}${path}`,
        token,
        CONTENT,
        'stream-1',
      );
      const done = retried.events.find((e) => e.event === 'done')?.data;
      const stored = await storedMessages(sys.env.MYSQL_URL, conversationId);
      const kinds = (events: SseEvent[]) => events.map((e) => e.event);
      const error = first.events.find((e) => e.event === 'error');
      const answers = model.received.length;
      await waitFor(() => logLines(sys, 'orchestrator', `resumed ${taskId}`).length > 0, {
        what: 'the resume to report',
        intervalMs: 50,
        timeoutMs: 10_000,
      });
      const counts = {
        firstStatus: first.status,
        firstEvents: kinds(first.events).join(','),
        firstDeltas: first.events.filter((e) => e.event === 'delta').length,
        error: error?.data,
        errorMsAfterSigterm: error ? error.at - stoppedAt : null,
        storedAtError: storedAtError!.map((m) => `${m.seq}:${m.role}`),
        handedOver: stopping.lines.filter((l) => l.includes(`handed ${taskId} over`)).length,
        resumedBy: on(ports[1]).lines.some((l) => l.includes(`recovered ${taskId}`))
          ? 'scan'
          : 'retry',
        modelAnswers: answers,
        laborExecutions: logLines(sys, 'labor-law-agent', 'executing', { taskId }).length,
        retryStatus: retried.status,
        retryEvents: `${kinds(retried.events).filter((k) => k === 'delta').length} delta, ${kinds(retried.events).filter((k) => k !== 'delta')}`,
        retryTextOnce:
          retried.events
            .filter((e) => e.event === 'delta')
            .map((e) => e.data.text)
            .join('') === done?.reply?.content,
        retryReply: [done?.taskId === taskId, done?.reply?.seq],
        storedMessages: stored.length,
        replies: stored.filter((m) => m.role === 'assistant').length,
        wholeAnswerStored: stored.some(
          (m) => m.role === 'assistant' && m.content.includes(CHUNKS.join('')),
        ),
      };
      console.log(
        `streamed turn stopped mid-answer (SHUTDOWN_HANDOVER_MS ${HANDOVER_MS}, model ${CHUNKS.length} × ${CHUNK_MS} ms): ${JSON.stringify(counts)}`,
      );
      expect(counts).toMatchObject({
        firstStatus: 200,
        error: { statusCode: 503, code: 'UNAVAILABLE' },
        storedAtError: ['1:user'],
        handedOver: 1,
        modelAnswers: 1,
        laborExecutions: 1,
        retryStatus: 200,
        retryTextOnce: true,
        retryReply: [true, 2],
        storedMessages: 2,
        replies: 1,
        wholeAnswerStored: true,
      });
      // Deltas, then the error as the last event; never a done.
      expect(counts.firstDeltas).toBeGreaterThan(0);
      expect(kinds(first.events).at(-1)).toBe('error');
      expect(kinds(first.events).filter((k) => k === 'done')).toEqual([]);
      expect(kinds(retried.events).filter((k) => k !== 'delta')).toEqual(['done']);
      expect(contiguous(stored)).toBe(true);
    } finally {
      await startOrchestrator(sys, ports[0]);
    }
  });
});
