import { Injectable } from '@nestjs/common';
import { Server } from 'http';
import { AddressInfo, connect, Socket } from 'net';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { ConversationRepository, Owner, SessionContext } from '@loom/session';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** Answers after 3 s, three times HTTP_SEND_TIMEOUT_MS, in which the turn has nothing to send. */
@Injectable()
class SlowHandler implements AgentHandler {
  async handle(ctx: SessionContext): Promise<any> {
    await new Promise((resolve) => setTimeout(resolve, 3000));
    return {
      answer: `slowly: ${ctx.question}`,
      usage: { promptTokens: 1, completionTokens: 1, costUsd: 0 },
    };
  }
}

/**
 * A client that asks for something large and then never reads it (a page of long messages, a
 * streamed turn) leaves the answer in the orchestrator's memory, in its socket's write buffer,
 * once the kernel's buffers are full. docs/configuration.md, HTTP_SEND_TIMEOUT_MS: an answer that
 * makes no progress for that long has its connection closed, whatever the client keeps open.
 */
describe('a client that never reads its answer', () => {
  let orch: InProcessOrchestrator;
  let server: Server;
  let port: number;
  let auth: string;
  let conversationId: string;
  const owner: Owner = { tenantId: 'tenant-slow-reader', userId: 'slow' };
  const clients: Socket[] = [];

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('slow_reader', {
      // one tenant of one user: its share is the whole bound (LOOM_MAX_MESSAGES_READ_PER_TENANT,
      // _PER_USER)
      env: {
        HTTP_SEND_TIMEOUT_MS: '1000',
        LOOM_MAX_MESSAGES_READ_IN_FLIGHT: '400',
        LOOM_MAX_MESSAGES_READ_PER_TENANT: '400',
        LOOM_MAX_MESSAGES_READ_PER_USER: '400',
      },
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'echo',
            description: 'echoes',
            role: 'specialist',
            intents: ['echo'],
            keywords: ['echo'],
          },
          SlowHandler,
          env,
        ),
      ],
    });
    server = orch.app.getHttpServer() as Server;
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    auth = orch.auth(owner.userId, owner.tenantId);
    // 200 answers of 100,000 characters: a page of 20 MB, more than loopback's socket buffers.
    const conversations = orch.get(ConversationRepository);
    const { meta } = await conversations.create(owner);
    conversationId = meta.conversationId;
    for (let i = 0; i < 200; i++)
      await conversations.appendMessage(owner, conversationId, {
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

  /**
   * Asks for the page of 200 (`pages` times) on a raw socket that never reads; resolves with the
   * server's side of that connection once the answer is stuck in its write buffer.
   */
  const askAndNeverRead = (pages = 1) =>
    new Promise<Socket>((resolve, reject) => {
      let serverSide: Socket | undefined;
      const onConnection = (socket: Socket) => {
        serverSide = socket;
        server.off('connection', onConnection);
      };
      server.on('connection', onConnection);
      const client = connect(port, '127.0.0.1', () => {
        client.pause();
        // `pages` requests pipelined: each answer after the one before.
        client.write(
          (
            `GET /v1/conversations/${conversationId}/messages?limit=200 HTTP/1.1\r\n` +
            `Host: x\r\nAuthorization: ${auth}\r\n\r\n`
          ).repeat(pages),
        );
      });
      clients.push(client);
      client.on('error', reject);
      const poll = setInterval(() => {
        if (!serverSide || serverSide.writableLength === 0) return;
        clearInterval(poll);
        resolve(serverSide);
      }, 20);
    });

  const page = () =>
    fetch(`http://127.0.0.1:${port}/v1/conversations/${conversationId}/messages?limit=200`, {
      headers: { authorization: auth },
    }).then(async (res) => [
      res.status,
      res.status === 200 ? ((await res.json()) as { items: unknown[] }).items.length : 0,
    ]);

  /** Resolves once the socket closes, or after `ms` (its destroyed flag then tells). */
  const closed = (socket: Socket, ms: number) =>
    new Promise<void>((resolve) => {
      if (socket.destroyed) return resolve();
      const timer = setTimeout(resolve, ms);
      socket.once('close', () => (clearTimeout(timer), resolve()));
    });

  it('is not cut off while its turn has nothing to send yet, JSON or streamed', async () => {
    const { meta } = await orch.get(ConversationRepository).create(owner);
    for (const [accept, status] of [
      ['application/json', 201],
      ['text/event-stream', 200],
    ] as const) {
      const res = await fetch(
        `http://127.0.0.1:${port}/v1/conversations/${meta.conversationId}/messages`,
        {
          method: 'POST',
          headers: { authorization: auth, 'content-type': 'application/json', accept },
          body: JSON.stringify({ content: `echo ${accept}` }),
        },
      );
      const text = await res.text();
      expect([res.status, text]).toEqual([
        status,
        expect.stringContaining(`slowly: echo ${accept}`),
      ]);
    }
  });

  it('is cut off once its answer stops moving', async () => {
    const stuck = await askAndNeverRead();
    // Closed by the server, not held for as long as the client keeps its side open (the bound
    // here is 60 times HTTP_SEND_TIMEOUT_MS, only so that a failure does not hang the suite).
    await closed(stuck, 60_000);
    expect(stuck.destroyed).toBe(true);
  });

  it('holds its room among the pages read at once until its answer is written or cut off', async () => {
    // Two pages of 200, pipelined: the bound (400) taken, the second's answer queued behind the first.
    const stuck = await askAndNeverRead(2);
    // Its pages are built and waiting in memory: they still count against the bound on pages.
    expect(await page()).toEqual([503, 0]);
    await closed(stuck, 60_000);
    // Their room is given back, the queued page's too: two pages are read at once.
    expect(await Promise.all([page(), page()])).toEqual([
      [200, 200],
      [200, 200],
    ]);
  });
});
