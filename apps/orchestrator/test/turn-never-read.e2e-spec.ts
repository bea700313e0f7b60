import { Injectable } from '@nestjs/common';
import { IncomingMessage, Server, ServerResponse } from 'http';
import { AddressInfo, connect, Socket } from 'net';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { ConversationRepository, Owner, SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** Answers at once, at length: 50,000 characters, sent again as deltas when streamed. */
@Injectable()
class LongHandler implements AgentHandler {
  async handle(ctx: SessionContext): Promise<any> {
    return {
      answer: `${ctx.question}: ${'y'.repeat(50_000)}`,
      usage: { promptTokens: 1, completionTokens: 1, costUsd: 0 },
    };
  }
}

/**
 * A turn's slot (LOOM_MAX_TURNS_IN_FLIGHT) bounds, among others, the memory of its answer: a
 * streamed one's events, up to twice its reply. It was given back as soon as the turn ended,
 * while an answer its client never reads stays in memory until its connection is cut
 * (HTTP_SEND_TIMEOUT_MS): so many such clients held answers past the bound. The slot is held
 * until the turn has ended and its response closed, as a page of messages holds its room.
 */
describe('a turn whose client never reads its answer', () => {
  let orch: InProcessOrchestrator;
  let server: Server;
  let port: number;
  let auth: string;
  let pageOf: string;
  const owner: Owner = { tenantId: 'tenant-never-read', userId: 'never' };
  const clients: Socket[] = [];

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('turn_never_read', {
      env: { HTTP_SEND_TIMEOUT_MS: '5000', LOOM_MAX_TURNS_IN_FLIGHT: '1' },
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'echo',
            description: 'echoes',
            role: 'specialist',
            intents: ['echo'],
            keywords: ['echo'],
          },
          LongHandler,
          env,
        ),
      ],
    });
    server = orch.app.getHttpServer() as Server;
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    auth = orch.auth(owner.userId, owner.tenantId);
    // A page of 20 MB, more than loopback's socket buffers: what is pipelined behind it waits
    // in the orchestrator's memory, as the answer of a client that stops reading does.
    const conversations = orch.get(ConversationRepository);
    pageOf = (await conversations.create(owner)).meta.conversationId;
    for (let i = 0; i < 200; i++)
      await conversations.appendMessage(owner, pageOf, {
        role: 'assistant',
        content: 'x'.repeat(100_000),
        agentType: 'labor-law',
        taskId: null,
        createdAt: new Date().toISOString(),
        tokens: 0,
      });
  });
  afterAll(async () => {
    for (const socket of clients) socket.destroy();
    await orch?.close();
  });

  const turn = async (accept = 'application/json') => {
    const { meta } = await orch.get(ConversationRepository).create(owner);
    const res = await fetch(
      `http://127.0.0.1:${port}/v1/conversations/${meta.conversationId}/messages`,
      {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json', accept },
        body: JSON.stringify({ content: 'echo this' }),
      },
    );
    await res.arrayBuffer();
    return res.status;
  };

  it.each(['text/event-stream', 'application/json'])(
    'holds its slot until its answer is written or cut off (%s)',
    async (accept) => {
      const { meta } = await orch.get(ConversationRepository).create(owner);
      const path = `/v1/conversations/${meta.conversationId}/messages`;
      // The turn's answer written whole (its response ended): its turn is over.
      const answered = new Promise<void>((resolve) => {
        const onRequest = (req: IncomingMessage, res: ServerResponse) => {
          if (req.method !== 'POST' || req.url !== path) return;
          server.off('request', onRequest);
          const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
          res.end = ((...args: unknown[]) => {
            setImmediate(resolve);
            return end(...args);
          }) as typeof res.end;
        };
        server.on('request', onRequest);
      });
      let serverSide: Socket | undefined;
      server.once('connection', (socket: Socket) => (serverSide = socket));
      const body = JSON.stringify({ content: 'echo never read' });
      const client = connect(port, '127.0.0.1', () => {
        client.pause();
        client.write(
          `GET /v1/conversations/${pageOf}/messages?limit=200 HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n\r\n` +
            `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nAccept: ${accept}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
      });
      clients.push(client);
      client.on('error', () => undefined);
      await answered;
      // Its answer is still in memory, unread: the one slot is still its own.
      expect(serverSide?.destroyed).toBe(false);
      expect(await turn()).toBe(503);
      // Cut off after HTTP_SEND_TIMEOUT_MS (the bound, 12 times that, only against a hang).
      await new Promise<void>((resolve) => {
        if (serverSide!.destroyed) return resolve();
        const timer = setTimeout(resolve, 60_000);
        serverSide!.once('close', () => (clearTimeout(timer), resolve()));
      });
      expect(serverSide!.destroyed).toBe(true);
      expect(await turn()).toBe(201);
    },
  );
});
