import { INestApplication, ValidationPipe } from '@nestjs/common';
import { connect, Socket } from 'net';
import request from 'supertest';
import { bootstrapAgent, LoomEnv } from '@loom/agent-kit';
import { ConversationLock, ConversationRepository } from '@loom/session';
import { createTestDatabase } from '@loom/testing';
import { LABOR_LAW_DESCRIPTOR } from '../../labor-law-agent/src/labor-law.descriptor';
import { LaborLawHandler } from '../../labor-law-agent/src/labor-law.handler';
import { LEGAL_RESEARCH_DESCRIPTOR } from '../../legal-research-agent/src/legal-research.descriptor';
import { LegalResearchHandler } from '../../legal-research-agent/src/legal-research.handler';
import { createOrchestrator, LINGER_MS } from '../src/bootstrap';
import { InProcessOrchestrator, rawHttp, startInProcessOrchestrator } from './in-process.support';
const { signJwt } = require('../../../scripts/lib/processes');

/** The orchestrator in-process (supertest) with two agents over Redis, on real MySQL and Redis. */
describe('orchestrator (HTTP, in-process)', () => {
  let app: INestApplication;
  let env: LoomEnv;
  let orch: InProcessOrchestrator;
  const token = (tid: string, sub: string) => orch.auth(sub, tid);

  beforeAll(async () => {
    orch = await startInProcessOrchestrator('orch', {
      agents: async (env) => [
        await bootstrapAgent(LEGAL_RESEARCH_DESCRIPTOR, LegalResearchHandler, env),
        await bootstrapAgent(LABOR_LAW_DESCRIPTOR, LaborLawHandler, env),
      ],
    });
    ({ app, env } = orch);
  });
  afterAll(() => orch?.close());

  it('answers /health and echoes a correlation id', async () => {
    const res = await request(app.getHttpServer())
      .get('/health')
      .set('x-correlation-id', 'corr-123');
    expect(res.status).toBe(200);
    expect(res.body.status).toBe('ok');
    expect(res.headers['x-correlation-id']).toBe('corr-123');
  });

  it('does not name the framework it runs on, in answers or in errors', async () => {
    const ok = await request(app.getHttpServer()).get('/health');
    const refused = await request(app.getHttpServer()).get('/v1/conversations');
    expect([ok.status, refused.status]).toEqual([200, 401]);
    expect(ok.headers['x-powered-by']).toBeUndefined();
    expect(refused.headers['x-powered-by']).toBeUndefined();
  });

  it('serves the OpenAPI document with every /v1 route', async () => {
    const res = await request(app.getHttpServer()).get('/docs-json');
    expect(res.status).toBe(200);
    expect(Object.keys(res.body.paths).sort()).toEqual(
      [
        '/health',
        '/metrics',
        '/v1/agents',
        '/v1/conversations',
        '/v1/conversations/{id}',
        '/v1/conversations/{id}/messages',
        '/v1/tasks/{taskId}',
      ].sort(),
    );
    // Bodies, query parameters and headers are described, not just the paths.
    expect(res.body.components.schemas.PostMessageDto.properties.content).toMatchObject({
      type: 'string',
      maxLength: 32_000,
    });
    const messages = res.body.paths['/v1/conversations/{id}/messages'];
    const names = (op: { parameters: { name: string }[] }) => op.parameters.map((p) => p.name);
    expect(names(messages.get)).toEqual(expect.arrayContaining(['id', 'afterSeq', 'limit']));
    expect(names(messages.post)).toEqual(expect.arrayContaining(['Idempotency-Key', 'Accept']));
    // What the route refuses with 400 (docs/security.md, "Input hardening").
    const key = messages.post.parameters.find(
      (p: { name: string }) => p.name === 'Idempotency-Key',
    );
    expect(key.schema).toEqual({ type: 'string', pattern: '^[\\x21-\\x7e]{1,200}$' });
  });

  it('answers every route with the schema its OpenAPI document gives, errors included', async () => {
    const server = app.getHttpServer();
    const doc = (await request(server).get('/docs-json')).body as OpenApiDoc;
    const auth = token('tenant-docs', 'dora');
    /** Checks `res` against the schema the document gives for this route and status. */
    const check = (path: string, method: string, res: { status: number; body: unknown }) => {
      const op = doc.paths[path][method];
      const schema = op.responses[String(res.status)]?.content?.['application/json']?.schema;
      expect({ route: `${method} ${path} ${res.status}`, documented: !!schema }).toEqual({
        route: `${method} ${path} ${res.status}`,
        documented: true,
      });
      expect(mismatches(doc, schema!, res.body, 'body')).toEqual([]);
    };
    const conv = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({});
    check('/v1/conversations', 'post', conv);
    const id = conv.body.conversationId;
    const again = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ conversationId: id });
    check('/v1/conversations', 'post', again);
    const turn = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: '公司辞退我不给经济补偿' });
    check('/v1/conversations/{id}/messages', 'post', turn);
    const get = (path: string) => request(server).get(path).set('authorization', auth);
    check('/v1/conversations', 'get', await get('/v1/conversations'));
    check('/v1/conversations/{id}', 'get', await get(`/v1/conversations/${id}`));
    check('/v1/conversations/{id}/messages', 'get', await get(`/v1/conversations/${id}/messages`));
    const task = await get(`/v1/tasks/${turn.body.taskId}`);
    expect(Object.keys(task.body.sharedContext).length).toBeGreaterThan(0);
    check('/v1/tasks/{taskId}', 'get', task);
    check('/v1/agents', 'get', await get('/v1/agents'));
    check('/health', 'get', await request(server).get('/health'));
    // /health's 503: an orchestrator on a database whose migrations have not run yet.
    const bare = await createTestDatabase('loom_orch_bare');
    const unready = await createOrchestrator({
      ...env,
      MYSQL_URL: bare.url,
      DB_MIGRATIONS_RUN: false,
    });
    try {
      await unready.init();
      const down = await request(unready.getHttpServer()).get('/health');
      expect(down.status).toBe(503);
      check('/health', 'get', down);
    } finally {
      await unready.close();
      await bare.drop();
    }
    // Errors: the body of API.md under every status a route documents.
    check('/v1/conversations/{id}', 'get', await get('/v1/conversations/missing-conversation'));
    check('/v1/conversations/{id}', 'get', await get('/v1/conversations/bad!id'));
    check('/v1/agents', 'get', await request(server).get('/v1/agents'));
    // A key every object inherits is 400 in any route's query (bootstrap.ts), these two included.
    check('/v1/agents', 'get', await get('/v1/agents?constructor=1'));
    check('/health', 'get', await request(server).get('/health?constructor=1'));
    check(
      '/v1/conversations/{id}/messages',
      'post',
      await request(server)
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', auth)
        .send({ content: 'x'.repeat(32_001) }),
    );
    check(
      '/v1/conversations',
      'post',
      await request(server)
        .post('/v1/conversations')
        .set('authorization', auth)
        .set('content-type', 'text/plain')
        .send('{}'),
    );
    // An empty body creates a conversation: the document says the body is optional.
    expect(doc.paths['/v1/conversations'].post.requestBody?.required).toBe(false);
    // Every /v1 operation documents its success body and the errors every route can answer.
    for (const [path, ops] of Object.entries(doc.paths))
      for (const [method, op] of Object.entries(ops)) {
        const statuses = Object.keys(op.responses);
        expect({ path, method, has2xx: statuses.some((s) => s.startsWith('2')) }).toEqual({
          path,
          method,
          has2xx: true,
        });
        if (path.startsWith('/v1'))
          expect({ path, method, statuses }).toEqual({
            path,
            method,
            statuses: expect.arrayContaining(['401', '429', '503']),
          });
      }
    await request(server).delete(`/v1/conversations/${id}`).set('authorization', auth);
  });

  it('needs a valid token with sub and tid', async () => {
    const server = app.getHttpServer();
    expect((await request(server).get('/v1/conversations')).body).toEqual({
      statusCode: 401,
      code: 'UNAUTHENTICATED',
      message: 'missing bearer token',
    });
    const noTenant = `Bearer ${signJwt({ sub: 'alice' }, env.LOOM_JWT_SECRET)}`;
    expect(
      (await request(server).get('/v1/conversations').set('authorization', noTenant)).status,
    ).toBe(401);
    // Identity providers' subjects work as they are.
    for (const sub of ['auth0|5f7c8ec7c33c6c004bbafe82', 'google-oauth2:1093', 'ann+x@example.com'])
      expect(
        (await request(server).get('/v1/conversations').set('authorization', token('t-idp', sub)))
          .status,
      ).toBe(200);
    const expired = `Bearer ${signJwt({ sub: 'alice', tid: 't' }, env.LOOM_JWT_SECRET, -10)}`;
    expect(
      (await request(server).get('/v1/conversations').set('authorization', expired)).status,
    ).toBe(401);
  });

  it('authenticates a request that carries a body before it reads the body', async () => {
    const server = app.getHttpServer();
    const refused = { statusCode: 401, code: 'UNAUTHENTICATED', message: 'missing bearer token' };
    // Neither parsed (400 malformed JSON) nor checked for its type (415): 401 first.
    const malformed = await request(server)
      .post('/v1/conversations')
      .set('content-type', 'application/json')
      .send('{"conversationId": ');
    expect([malformed.status, malformed.body]).toEqual([401, refused]);
    const form = await request(server)
      .post('/v1/conversations')
      .set('content-type', 'text/plain')
      .send('conversationId=mine-00000001');
    expect([form.status, form.body]).toEqual([401, refused]);
    // On a raw socket: 300 KB declared, none sent. The 401 comes at once, and the connection is
    // closed rather than its body waited for (until the request time-out, 30 s).
    const answer = await rawHttp(
      orch.app,
      'POST /v1/conversations/c_anything0001/messages HTTP/1.1\r\nHost: x\r\n' +
        'Authorization: Bearer not.a.token\r\nContent-Type: application/json\r\n' +
        'Content-Length: 300000\r\n\r\n{"content":"',
    );
    expect(answer).toMatch(/^HTTP\/1\.1 401 /);
    expect(answer).toMatch(/\r\nConnection: close\r\n/i);
    expect(answer).toContain('"message":"invalid or expired token"');
    // With a valid token the same body is read and answered as before.
    const ok = await request(server)
      .post('/v1/conversations')
      .set('authorization', token('tenant-body', 'bo'))
      .send({});
    expect(ok.status).toBe(201);
  });

  it('answers bad bodies with a fixed message that echoes nothing sent', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'alice');
    const send = (body: string) =>
      request(server)
        .post('/v1/conversations')
        .set('authorization', auth)
        .set('content-type', 'application/json')
        .send(body);
    const malformed = await send('{"conversationId": sk_live_4eC39HqLyjWDarjtT1zdp7dc');
    expect(malformed.body).toEqual({
      statusCode: 400,
      code: 'VALIDATION_FAILED',
      message: 'malformed JSON body',
    });
    // An array would reach the ValidationPipe, which sets .constructor on it: that alone makes
    // V8 drop to slow array paths for the whole process. It is refused while still raw text.
    const array = await send('  [{"conversationId": "x"}]');
    expect(array.body).toEqual({
      statusCode: 400,
      code: 'VALIDATION_FAILED',
      message: 'the body must be a JSON object',
    });
    const form = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .set('content-type', 'text/plain')
      .send('conversationId=mine-00000001');
    expect([form.status, form.body.code]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    // A known path with a method it does not answer: 405 with Allow; an unknown path: 404.
    const wrongMethod = await request(server)
      .delete('/v1/conversations')
      .set('authorization', auth);
    expect([wrongMethod.status, wrongMethod.headers.allow, wrongMethod.body.code]).toEqual([
      405,
      'GET, HEAD, POST',
      'METHOD_NOT_ALLOWED',
    ]);
    const byId = await request(server).put('/v1/conversations/c_anything0001');
    expect([byId.status, byId.headers.allow]).toEqual([405, 'DELETE, GET, HEAD']);
    const unknown = await request(server).get('/v1/nothing-here').set('authorization', auth);
    expect([unknown.status, unknown.body.message]).toEqual([404, 'no such route']);
    // The auth scheme is case-insensitive (RFC 7235).
    expect(
      (
        await request(server)
          .get('/v1/conversations')
          .set('authorization', auth.replace('Bearer', 'bearer'))
      ).status,
    ).toBe(200);
  });

  it('refuses what its checks cannot read: other charsets, oversized declarations, prototype keys, malformed HTTP', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'dave');
    // UTF-16 would be decoded past the depth and object checks, which read UTF-8.
    const deep = `{"metadata":{"a":${'['.repeat(5000)}${']'.repeat(5000)}}}`;
    const utf16 = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .set('content-type', 'application/json; charset=utf-16le')
      .send(Buffer.from(deep, 'utf16le'));
    expect([utf16.status, utf16.body.code]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    const utf8 = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .set('content-type', 'application/json; charset="UTF-8"')
      .send('{}');
    expect(utf8.status).toBe(201);
    // Names every object inherits slip past the whitelist: refused in bodies, nested or not, and queries.
    const id = utf8.body.conversationId;
    for (const body of [
      '{"content":"a","constructor":1}',
      '{"metadata":{"x":{"__proto__":{"polluted":1}}}}',
    ]) {
      const res = await request(server)
        .post(body.includes('content') ? `/v1/conversations/${id}/messages` : '/v1/conversations')
        .set('authorization', auth)
        .set('content-type', 'application/json')
        .send(body);
      expect([res.status, res.body.code]).toEqual([400, 'VALIDATION_FAILED']);
    }
    const query = await request(server)
      .get('/v1/conversations?toString=1')
      .set('authorization', auth);
    expect([query.status, query.body.message]).toEqual([400, '(unknown property) is not allowed']);
    for (const limit of ['0x10', '1e1', '+5', ' 5'])
      expect(
        (
          await request(server)
            .get(`/v1/conversations?limit=${encodeURIComponent(limit)}`)
            .set('authorization', auth)
        ).status,
      ).toBe(400);
    // Metadata is rewritten with the conversation on every turn: 16 KB of JSON at most.
    const bulky = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ metadata: { note: 'x'.repeat(16 * 1024) } });
    expect([bulky.status, bulky.body.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);

    // On a raw socket: a declared length over the limit is refused before any body is sent, and
    // malformed HTTP gets the same error shape as everything else.
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address();
    const raw = (text: string) => rawHttp(orch.app, text);
    const declared = await raw(
      'POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: ' +
        auth +
        '\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n',
    );
    expect(declared).toMatch(/^HTTP\/1\.1 413 /);
    expect(declared).toContain('"code":"PAYLOAD_TOO_LARGE"');
    // A chunked body declares no length: once past the limit it is refused there and then, not
    // read to its end (which a client that keeps sending never reaches) and answered 408.
    const chunked = await new Promise<{ answer: string; sentWhenAnswered: number }>(
      (resolve, reject) => {
        const chunk = Buffer.alloc(64 * 1024, 'x');
        let sent = 0;
        let answer = '';
        let sentWhenAnswered = -1;
        const socket = connect(port, '127.0.0.1', () => {
          socket.write(
            `POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\n` +
              'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
          );
          const more = () => {
            // 8 MB at most, and never the closing chunk: this client does not stop by itself.
            if (sentWhenAnswered >= 0 || socket.destroyed || sent >= 128) return;
            sent += 1;
            socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`, () => setImmediate(more));
          };
          more();
        });
        socket.on('data', (d) => {
          if (sentWhenAnswered < 0) sentWhenAnswered = sent;
          answer += d.toString();
        });
        socket.on('close', () => resolve({ answer, sentWhenAnswered }));
        socket.on('error', (err) => (answer ? resolve({ answer, sentWhenAnswered }) : reject(err)));
        socket.setTimeout(10_000, () => socket.destroy());
      },
    );
    expect(chunked.answer).toMatch(/^HTTP\/1\.1 413 [\s\S]*\r\nConnection: close\r\n/i);
    expect(chunked.answer).toContain('"code":"PAYLOAD_TOO_LARGE"');
    // Answered while the client was still sending: 384 KB is 6 chunks; allow for buffering.
    expect(chunked.sentWhenAnswered).toBeLessThan(128);
    const garbage = await raw('GARBAGE\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
    expect(garbage).toContain('"code":"VALIDATION_FAILED"');
    const headers = await raw(
      `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expect(headers).toMatch(/^HTTP\/1\.1 431 /);
    expect(headers).toContain('"code":"HEADERS_TOO_LARGE"');
    // The same on a kept-alive connection that has served a request already.
    const second = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () =>
        socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'),
      );
      let got = '';
      socket.on('data', (d) => {
        const first = !got;
        got += d.toString();
        if (first)
          socket.write(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
      });
      socket.on('end', () => resolve(got));
      socket.on('error', reject);
      socket.setTimeout(5000, () => (socket.destroy(), resolve(got)));
    });
    expect(second).toMatch(/^HTTP\/1\.1 200 [\s\S]*HTTP\/1\.1 431 /);
    expect(second).toContain('"code":"HEADERS_TOO_LARGE"');
    // An Expect Node does not do: its 417, in the API's shape rather than an empty body.
    const expectation = await raw('GET /health HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n');
    expect(expectation).toMatch(/^HTTP\/1\.1 417 /);
    expect(expectation).toContain('"code":"VALIDATION_FAILED"');
    // HTTP/1.1 without a Host: Node's own 400 had an empty body; HTTP/1.0 needs none.
    const hostless = await raw(`GET /v1/agents HTTP/1.1\r\nAuthorization: ${auth}\r\n\r\n`);
    expect(hostless).toMatch(/^HTTP\/1\.1 400 /);
    expect(hostless).toContain('"code":"VALIDATION_FAILED"');
    expect(await raw('GET /health HTTP/1.0\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
    // CONNECT asks for a tunnel, which this is not: Node closed the connection without a word.
    for (const target of ['example.com:443', '/v1/conversations']) {
      const tunnel = await raw(`CONNECT ${target} HTTP/1.1\r\nHost: example.com:443\r\n\r\n`);
      expect(tunnel).toMatch(/^HTTP\/1\.1 405 [\s\S]*\r\nAllow: \r\n/);
      expect(tunnel).toContain('"code":"METHOD_NOT_ALLOWED"');
    }
    // Its socket is no longer the server's to time out: it is closed once LINGER_MS is over, not
    // held for as long as a client keeps its own side open (a write then meets a reset).
    const reset = await new Promise<string>((resolve) => {
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () =>
        socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n'),
      );
      socket.resume();
      socket.on('end', () =>
        setTimeout(() => {
          socket.write('x');
          setTimeout(() => socket.write('y'), 200);
        }, LINGER_MS + 500),
      );
      socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
      socket.setTimeout(5_000, () => (socket.destroy(), resolve('still open')));
    });
    expect(['ECONNRESET', 'EPIPE']).toContain(reset);
    await request(server).get('/health').expect(200);
  });

  it('stops promptly while clients it refused on the raw socket keep their side open', async () => {
    // Malformed HTTP and CONNECT are answered on the socket itself. A client that keeps its own
    // side of such a connection open held it, and with it the server's close: a graceful stop
    // waited for as long as the client liked.
    const own = await startInProcessOrchestrator('orchstop', {
      env: { SHUTDOWN_HANDOVER_MS: '200' },
    });
    const server = own.app.getHttpServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address();
    const held: Socket[] = [];
    for (const payload of [
      'GARBAGE\r\n\r\n',
      'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n',
    ]) {
      const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () =>
        socket.write(payload),
      );
      socket.resume();
      socket.on('error', () => undefined);
      await new Promise((resolve) => socket.on('end', resolve));
      held.push(socket);
    }
    const started = Date.now();
    const letGo = setTimeout(() => held.forEach((s) => s.destroy()), 15_000);
    await own.close();
    clearTimeout(letGo);
    held.forEach((s) => s.destroy());
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('refuses a body of more JSON values than any it accepts before validating it', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'frank');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    // Walking 20,000 made-up keys or 80,000 nested arrays held the event loop about 300 ms each
    // time, only for the ValidationPipe to refuse them.
    const keys = Array.from({ length: 20_000 }, (_, i) => `"k${i}":1`).join(',');
    const arrays = Array(8_000).fill('[[[[[[[[[[1]]]]]]]]]]').join(',');
    const validate = jest.spyOn(ValidationPipe.prototype, 'transform');
    try {
      for (const [path, body] of [
        [`/v1/conversations/${id}/messages`, `{"content":"hi",${keys}}`],
        ['/v1/conversations', `{"metadata":{"a":[${arrays}]}}`],
      ]) {
        const res = await request(server)
          .post(path)
          .set('authorization', auth)
          .set('content-type', 'application/json')
          .send(body);
        expect(res.body).toEqual({
          statusCode: 413,
          code: 'PAYLOAD_TOO_LARGE',
          message: 'the body holds more than 10000 JSON values',
        });
      }
      expect(validate).not.toHaveBeenCalled();
    } finally {
      validate.mockRestore();
    }
    // The densest metadata within its 16 KB still reaches validation, and is taken.
    const dense = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ metadata: { a: Array(8_000).fill(0) } });
    expect(dense.status).toBe(201);
    // So does metadata of empty arrays within its 16 KB: each is one value, not two.
    const empties = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ metadata: { a: Array(5_400).fill([]) } });
    expect(empties.status).toBe(201);
  });

  it('refuses bytes that are not UTF-8, ids it cannot decode and cursors past any date, quoting nothing', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'erin');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    // Would have been stored as U+FFFD U+FFFE: changed without a word.
    const latin1 = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .set('content-type', 'application/json')
      .send(
        Buffer.concat([
          Buffer.from('{"content":"'),
          Buffer.from([0xff, 0xfe]),
          Buffer.from(' bad"}'),
        ]),
      );
    expect([latin1.status, latin1.body.code]).toEqual([400, 'VALIDATION_FAILED']);
    expect(
      (await request(server).get(`/v1/conversations/${id}`).set('authorization', auth)).body
        .messageCount,
    ).toBe(0);
    for (const path of [
      '/v1/conversations/%ff%feabcdefgh',
      '/v1/conversations/abcdefgh%ZZ/messages',
      '/v1/tasks/%E0%A4%A',
    ]) {
      const res = await request(server).get(path).set('authorization', auth);
      expect([path, res.status, res.body.code]).toEqual([path, 400, 'INVALID_ID']);
      expect(res.body.message).not.toMatch(/%/);
    }
    const farFuture = Buffer.from(JSON.stringify([8.64e15 + 1, 'abcdefgh'])).toString('base64url');
    const cursor = await request(server)
      .get(`/v1/conversations?cursor=${farFuture}`)
      .set('authorization', auth);
    expect([cursor.status, cursor.body.code]).toEqual([400, 'VALIDATION_FAILED']);
  });

  it('counts content in characters, answers SSE errors it can know with a status, checks cursors', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'carol');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    const post = (content: string, accept = 'application/json', to = id) =>
      request(server)
        .post(`/v1/conversations/${to}/messages`)
        .set('authorization', auth)
        .set('accept', accept)
        .send({ content });
    // 16,001 emoji are 16,001 characters (32,002 UTF-16 units): within the 32,000 limit.
    expect((await post('👍'.repeat(16_001))).status).toBe(201);
    expect((await post('a'.repeat(32_001))).body.code).toBe('PAYLOAD_TOO_LARGE');
    // A lone low surrogate is a character too.
    expect((await post('\udc00'.repeat(32_001))).body.code).toBe('PAYLOAD_TOO_LARGE');
    // Within the limit, a lone surrogate (valid JSON as `\ud800`, but no text) is the client's
    // error: stored in the task, MySQL's JSON functions refused it and every agent failed (502).
    for (const text of ['a\ud800b', '\udc00', '😀'.slice(0, 1)])
      for (const accept of ['application/json', 'text/event-stream']) {
        const res = await post(text, accept);
        expect([text, accept, res.status, res.type, res.body.code]).toEqual([
          text,
          accept,
          400,
          'application/json',
          'VALIDATION_FAILED',
        ]);
      }
    const after = await request(server)
      .get(`/v1/conversations/${id}/messages`)
      .set('authorization', auth);
    expect(after.body.items.map((m: { content: string }) => m.content.length)).toEqual([
      32_002,
      expect.any(Number),
    ]);
    // SSE only when the client prefers it: q=0 refuses it, and media types ignore case.
    const refused = await post('hi', 'text/event-stream;q=0, application/json');
    expect([refused.status, refused.type]).toEqual([201, 'application/json']);
    const upper = await post('hi', 'TEXT/EVENT-STREAM');
    expect([upper.status, upper.type]).toEqual([200, 'text/event-stream']);
    const sseTooLarge = await post('a'.repeat(32_001), 'text/event-stream');
    expect([sseTooLarge.status, sseTooLarge.body.code]).toEqual([413, 'PAYLOAD_TOO_LARGE']);
    const sseMissing = await post('hi', 'text/event-stream', 'c_missingconversation');
    expect([sseMissing.status, sseMissing.body.code]).toEqual([404, 'NOT_FOUND']);
    const cursor = Buffer.from('[1e400,"c_missingconversation"]').toString('base64url');
    const list = await request(server)
      .get(`/v1/conversations?cursor=${cursor}`)
      .set('authorization', auth);
    expect([list.status, list.body.code]).toEqual([400, 'VALIDATION_FAILED']);
  });

  it('takes the longest content however its JSON is escaped', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'grace');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    // 32,000 emoji as an encoder that escapes everything past ASCII writes them (Python's
    // json.dumps by default): 12 bytes each, 384,014 bytes in all.
    const content = '😀'.repeat(32_000);
    const body = JSON.stringify({ content }).replace(
      /[\u0080-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
    );
    expect(Buffer.byteLength(body)).toBe(384_014);
    const res = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .set('content-type', 'application/json')
      .send(body);
    expect([res.status, res.body.userMessage?.content === content]).toEqual([201, true]);
  });

  it('plays a turn through the agents and lists them', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'alice');
    const agentsRes = await request(server).get('/v1/agents').set('authorization', auth);
    expect(agentsRes.body.items.map((a: { agentType: string }) => a.agentType)).toEqual([
      'labor-law',
      'legal-research',
    ]);
    const conv = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ conversationId: 'my-own-conversation-1' });
    expect(conv.status).toBe(201);
    expect(conv.body.conversationId).toBe('my-own-conversation-1');
    expect(
      (
        await request(server)
          .post('/v1/conversations')
          .set('authorization', auth)
          .send({ conversationId: 'my-own-conversation-1' })
      ).status,
    ).toBe(200);
    const turn = await request(server)
      .post('/v1/conversations/my-own-conversation-1/messages')
      .set('authorization', auth)
      .send({ content: '公司辞退我不给经济补偿' });
    expect(turn.status).toBe(201);
    expect(turn.body).toMatchObject({
      agents: ['legal-research', 'labor-law'],
      userMessage: { seq: 1, role: 'user' },
      reply: { seq: 2, role: 'assistant', agentType: 'labor-law' },
    });
    const list = await request(server).get('/v1/conversations').set('authorization', auth);
    expect(list.body.items[0]).toMatchObject({
      conversationId: 'my-own-conversation-1',
      messageCount: 2,
      currentIntent: 'labor-law',
    });
    expect(list.body.items[0].usage.completionTokens).toBeGreaterThan(0);
  });

  it('deletes a conversation only while no turn holds it', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'alice');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: '公司辞退我不给经济补偿' })
      .expect(201);
    // A turn (here: the test) holds the conversation lock.
    const held = await app.get(ConversationLock).acquire({ tenantId: 'tenant-a' }, id);
    let settled = false;
    const deleting = request(server)
      .delete(`/v1/conversations/${id}`)
      .set('authorization', auth)
      .then((res) => ((settled = true), res));
    await new Promise((r) => setTimeout(r, 300));
    expect(settled).toBe(false);
    await request(server).get(`/v1/conversations/${id}`).set('authorization', auth).expect(200);
    await held.release();
    expect((await deleting).status).toBe(204);
    await request(server).get(`/v1/conversations/${id}`).set('authorization', auth).expect(404);
  });

  it('a turn that waited out the deletion of its conversation answers 404 and leaves the id free', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'erin');
    const id = 'c_deleted_while_waiting_1';
    await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ conversationId: id })
      .expect(201);
    const held = await app.get(ConversationLock).acquire({ tenantId: 'tenant-a' }, id);
    const posting = request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: 'hello' })
      .then((res) => res);
    await new Promise((r) => setTimeout(r, 300)); // past its first read, waiting for the lock
    await app.get(ConversationRepository).purge('tenant-a', id); // a DELETE that got there first
    await held.release();
    expect((await posting).status).toBe(404);
    // Taking the lock wrote a fence row; a fencing counter alone does not keep the id taken.
    const again = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({ conversationId: id });
    expect([again.status, again.body.conversationId]).toEqual([201, id]);
  });

  it('folds older turns into a summary past 30 messages, keeps raw messages, titles once', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'summary-user');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    let last;
    for (let i = 1; i <= 16; i++) {
      last = await request(server)
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', auth)
        .send({
          content:
            i === 1
              ? '我的劳动合同被公司单方面解除了，想咨询经济补偿怎么计算才合理合法的问题'
              : `第${i}个问题：加班工资怎么算`,
        });
      expect(last.status).toBe(201);
    }
    const all = await request(server)
      .get(`/v1/conversations/${id}/messages?limit=200`)
      .set('authorization', auth);
    expect(all.body.items.map((m: { seq: number }) => m.seq)).toEqual(
      Array.from({ length: 32 }, (_, i) => i + 1),
    );
    const view = await request(server).get(`/v1/conversations/${id}`).set('authorization', auth);
    expect(Array.from(view.body.title as string).length).toBeLessThanOrEqual(60);
    expect(view.body.title).toContain('劳动合同');
    const next = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: '那年假呢?' });
    const task = await request(server)
      .get(`/v1/tasks/${next.body.taskId}`)
      .set('authorization', auth);
    const labor = task.body.executions.find(
      (e: { agentType: string }) => e.agentType === 'labor-law',
    );
    expect(labor.context.summaryIncluded).toBe(true);
    // history after the summary's range only: the summary covers seq 1..12 after 32 messages
    expect(labor.context.historyMessages).toBeLessThanOrEqual(20);
    expect(
      (await request(server).get(`/v1/conversations/${id}`).set('authorization', auth)).body.title,
    ).toBe(view.body.title);
  });

  it('leaves no message between the summary and the history an agent sees, long messages too', async () => {
    const server = app.getHttpServer();
    const auth = token('tenant-a', 'long-messages-user');
    const owner = { tenantId: 'tenant-a', userId: 'long-messages-user' };
    const conversations = app.get(ConversationRepository);
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    // About 1,000 tokens a question: the agents' 3,000-token window holds a few messages only.
    const long = (i: number) =>
      `第${i}个问题：劳动合同解除后经济补偿怎么计算？` +
      '公司以业务调整为由单方面解除劳动合同，'.repeat(50);
    const seen: Array<{ userSeq: number; summarizedTo: number; history: number }> = [];
    for (let i = 1; i <= 6; i++) {
      const summarizedTo = (await conversations.summary(owner, id))?.toSeq ?? 0;
      const turn = await request(server)
        .post(`/v1/conversations/${id}/messages`)
        .set('authorization', auth)
        .send({ content: long(i) });
      expect(turn.status).toBe(201);
      const task = await request(server)
        .get(`/v1/tasks/${turn.body.taskId}`)
        .set('authorization', auth);
      const labor = task.body.executions.find(
        (e: { agentType: string }) => e.agentType === 'labor-law',
      );
      seen.push({
        userSeq: turn.body.userMessage.seq,
        summarizedTo,
        history: labor.context.historyMessages,
      });
    }
    // Each turn: the summary covers 1..summarizedTo and the history the rest before the question.
    expect(seen.map((t) => t.summarizedTo + t.history)).toEqual(seen.map((t) => t.userSeq - 1));
    expect(seen.at(-1)!.summarizedTo).toBeGreaterThan(0); // the window could not hold them all
  });
});

type SchemaObject = {
  $ref?: string;
  allOf?: SchemaObject[];
  oneOf?: SchemaObject[];
  pattern?: string;
  format?: string;
  type?: string;
  nullable?: boolean;
  enum?: unknown[];
  properties?: Record<string, SchemaObject>;
  required?: string[];
  items?: SchemaObject;
  additionalProperties?: boolean | SchemaObject;
};
type OpenApiDoc = {
  paths: Record<
    string,
    Record<
      string,
      {
        requestBody?: { required?: boolean };
        responses: Record<string, { content?: Record<string, { schema: SchemaObject }> }>;
      }
    >
  >;
  components: { schemas: Record<string, SchemaObject> };
};

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

/** Where `value` departs from `schema`: missing or undeclared properties, wrong types, enums. */
function mismatches(doc: OpenApiDoc, schema: SchemaObject, value: unknown, at: string): string[] {
  if (schema.$ref)
    return mismatches(doc, doc.components.schemas[schema.$ref.split('/').pop()!], value, at);
  if (value === null) return schema.nullable ? [] : [`${at} is null`];
  if (schema.allOf) return schema.allOf.flatMap((s) => mismatches(doc, s, value, at));
  if (schema.oneOf) {
    const matching = schema.oneOf.filter((s) => mismatches(doc, s, value, at).length === 0);
    return matching.length === 1 ? [] : [`${at} matches ${matching.length} of its schemas`];
  }
  if (schema.enum && !schema.enum.includes(value)) return [`${at} = ${String(value)} not in enum`];
  if (schema.properties) {
    if (typeof value !== 'object' || Array.isArray(value)) return [`${at} is not an object`];
    const out: string[] = [];
    const record = value as Record<string, unknown>;
    for (const key of Object.keys(record))
      if (!(key in schema.properties) && schema.additionalProperties !== true)
        out.push(`${at}.${key} is not documented`);
    for (const [key, sub] of Object.entries(schema.properties)) {
      if (!(key in record)) {
        if (schema.required?.includes(key)) out.push(`${at}.${key} is missing`);
      } else out.push(...mismatches(doc, sub, record[key], `${at}.${key}`));
    }
    return out;
  }
  if (schema.type === 'array')
    return Array.isArray(value)
      ? value.flatMap((v, i) => mismatches(doc, schema.items!, v, `${at}[${i}]`))
      : [`${at} is not an array`];
  if (schema.type === 'object' && (typeof value !== 'object' || Array.isArray(value)))
    return [`${at} is not an object`];
  if (schema.type === 'object' && typeof schema.additionalProperties === 'object')
    return Object.entries(value as Record<string, unknown>).flatMap(([k, v]) =>
      mismatches(doc, schema.additionalProperties as SchemaObject, v, `${at}.${k}`),
    );
  if (schema.type === 'integer' || schema.type === 'number')
    return typeof value === 'number' ? [] : [`${at} is not a number`];
  if (schema.type === 'string') {
    if (typeof value !== 'string') return [`${at} is not a string`];
    if (schema.pattern && !new RegExp(schema.pattern).test(value))
      return [`${at} does not match ${schema.pattern}`];
    if (schema.format === 'date-time' && !RFC3339.test(value)) return [`${at} is not a date-time`];
    return [];
  }
  if (schema.type === 'boolean')
    return typeof value === 'boolean' ? [] : [`${at} is not a boolean`];
  if (schema.type === 'object')
    return typeof value === 'object' && !Array.isArray(value) ? [] : [`${at} is not an object`];
  return [];
}
