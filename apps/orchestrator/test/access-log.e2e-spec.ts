import { Injectable, Logger } from '@nestjs/common';
import { Writable } from 'stream';
import request from 'supertest';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { SessionContext, Usage } from '@loom/session';
import { appProcesses } from '@loom/testing';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * docs/security.md: one access-log line per request, and `x-correlation-id` echoed. Requests
 * refused before routing (by the middleware that checks bodies before Nest's) are requests too:
 * an operator looking for a client's 400s, 413s or 415s, or for the id a client quotes, finds
 * them in the log like any other.
 */
describe('access log and correlation id of requests refused before routing', () => {
  let orch: InProcessOrchestrator;
  let out = '';
  const lines = () =>
    out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('access_log');
    const destination = new Writable({
      write(chunk, _enc, done) {
        out += chunk.toString();
        done();
      },
    });
    Logger.overrideLogger(
      new LoomLogger(
        createPinoLogger({ service: 'orchestrator', level: 'info', format: 'json', destination }),
      ),
    );
  });
  afterAll(() => orch?.close());

  /**
   * The lines logged with `correlationId`, once there are any. The access log is written when
   * the response has finished on the server's side, which a busy machine may bring after the
   * client has read the answer: waited for (10 s bound), and for at least the 100 ms this read
   * always allowed, so a second line written with the first is still seen.
   */
  const loggedWith = async (correlationId: string) => {
    const of = () => lines().filter((l) => l.correlationId === correlationId);
    await new Promise((r) => setTimeout(r, 100));
    await appProcesses()
      .waitFor(async () => of().length > 0, {
        what: `the access log line of ${correlationId}`,
        timeoutMs: 10_000,
      })
      .catch(() => undefined); // the assertion says what is missing
    return of();
  };

  it.each([
    ['a malformed JSON body', 400, 'application/json', '{"metadata":', true],
    ['a body in another content type', 415, 'text/plain', 'hello', true],
    ['a declared body over the limit', 413, 'application/json', 'x'.repeat(400 * 1024), true],
    ['a body without a token', 401, 'application/json', '{}', false],
  ])(
    '%s: answered with its correlation id, and logged',
    async (_what, status, type, body, authed) => {
      const correlationId = `refused-${status}-${Date.now()}`;
      const req = request(orch.app.getHttpServer())
        .post('/v1/conversations')
        .set('content-type', type)
        .set('x-correlation-id', correlationId);
      if (authed) req.set('authorization', orch.auth('al', 'tenant-log'));
      const res = await req.send(body);
      expect(res.status).toBe(status);
      expect(res.headers['x-correlation-id']).toBe(correlationId);
      expect(await loggedWith(correlationId)).toEqual([
        expect.objectContaining({
          msg: 'request completed',
          method: 'POST',
          path: '/v1/conversations',
          status,
        }),
      ]);
    },
  );

  // A client flooding the API with refused requests is found by its tenant.
  it.each([
    ['a body in another content type', 415, '/v1/conversations', 'text/plain', 'hello'],
    [
      'a declared body over the limit',
      413,
      '/v1/conversations',
      'application/json',
      'x'.repeat(400 * 1024),
    ],
    ['a path no route takes', 404, '/v1/nowhere', 'application/json', '{}'],
  ])(
    '%s with a valid token: its line names the tenant',
    async (_what, status, path, type, body) => {
      const correlationId = `tenant-${status}-${Date.now()}`;
      const res = await request(orch.app.getHttpServer())
        .post(path)
        .set('content-type', type)
        .set('authorization', orch.auth('al', 'tenant-log'))
        .set('x-correlation-id', correlationId)
        .send(body);
      expect(res.status).toBe(status);
      expect(await loggedWith(correlationId)).toEqual([
        expect.objectContaining({ msg: 'request completed', status, tenantId: 'tenant-log' }),
      ]);
    },
  );

  it('a request taken by a route: one line, with the tenant the token names', async () => {
    const correlationId = `routed-${Date.now()}`;
    const res = await request(orch.app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', orch.auth('al', 'tenant-log'))
      .set('x-correlation-id', correlationId)
      .send({});
    expect(res.status).toBe(201);
    expect(res.headers['x-correlation-id']).toBe(correlationId);
    expect(await loggedWith(correlationId)).toEqual([
      expect.objectContaining({ msg: 'request completed', status: 201, tenantId: 'tenant-log' }),
    ]);
  });
});

/** Answers once the test lets it (or after 10 s). */
let answer: () => void = () => undefined;
@Injectable()
class WaitingHandler implements AgentHandler {
  async handle(ctx: SessionContext): Promise<{ answer: string; usage: Usage }> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, 10_000);
      answer = () => (clearTimeout(timer), resolve());
    });
    return {
      answer: `you said: ${ctx.question}`,
      usage: { promptTokens: 1, completionTokens: 1, costUsd: 0 },
    };
  }
}

/**
 * A client that gives up on a turn (its own time-out, a closed tab) was logged as
 * `request completed` with the status the route had set for an answer it never got (201):
 * the access log showed a success where the client saw none.
 */
describe('access log of a request its client gave up on', () => {
  let orch: InProcessOrchestrator;
  let out = '';
  const lines = () =>
    out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('access_log_abort', {
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'echo',
            description: 'echoes',
            role: 'specialist',
            intents: ['echo'],
            keywords: ['echo'],
          },
          WaitingHandler,
          env,
        ),
      ],
    });
    const destination = new Writable({
      write(chunk, _enc, done) {
        out += chunk.toString();
        done();
      },
    });
    Logger.overrideLogger(
      new LoomLogger(
        createPinoLogger({ service: 'orchestrator', level: 'info', format: 'json', destination }),
      ),
    );
  });
  afterAll(async () => {
    answer();
    await orch?.close();
  });

  it('is logged as aborted, not with a status it never got', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('al', 'tenant-abort');
    const { conversationId } = (
      await request(server).post('/v1/conversations').set('authorization', auth).send({})
    ).body;
    const correlationId = `abort-${Date.now()}`;
    const turn = request(server)
      .post(`/v1/conversations/${conversationId}/messages`)
      .set('authorization', auth)
      .set('x-correlation-id', correlationId)
      .timeout(1_000)
      .send({ content: 'echo this' });
    await expect(turn).rejects.toThrow(/timeout/i);
    const line = async () => {
      for (let i = 0; i < 100; i++) {
        const found = lines().find(
          (l) => l.correlationId === correlationId && l.context === 'HTTP',
        );
        if (found) return found;
        await new Promise((r) => setTimeout(r, 50));
      }
      return undefined;
    };
    expect(await line()).toMatchObject({ msg: 'request aborted', method: 'POST' });
    expect((await line())?.status).toBeUndefined();
    answer();
  });
});
