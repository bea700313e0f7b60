import { randomBytes, randomUUID } from 'crypto';
import Redis from 'ioredis';
import { createConnection, Connection } from 'mysql2/promise';
import { firstValueFrom } from 'rxjs';
import { agentExecutePattern, RedisStreamsClient } from '@loom/agent-kit';
import { AssignmentClaims, AssignmentSigner } from '@loom/security';
import { client, RunningSystem, startSystem } from './system';

/**
 * Issue 5 acceptance, every app a real process on Redis and MySQL: tenant isolation at every
 * route, forged dispatches published straight to Redis, the shared-context ACL with its audit,
 * stored redaction, id fuzzing over HTTP and RPC, and errors that echo nothing.
 */
const ACL = { 'follow-up': { 'research.statutes': ['labor-law'] } };
const MISSING_CONV = 'c_doesnotexist0000000000';
const MISSING_TASK = 't_doesnotexist0000000000';
/** Headers that differ between any two requests, whoever asks. */
const VOLATILE = new Set([
  'date',
  'x-correlation-id',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
]);

type Api = ReturnType<typeof client>;
type Answer = Awaited<ReturnType<Api>>;

const headersOf = (a: Answer) =>
  Object.fromEntries([...a.headers.entries()].filter(([k]) => !VOLATILE.has(k)));

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

describe('system: security (isolation, signed assignments, ACL, hardening)', () => {
  let sys: RunningSystem;
  let alice: Api;
  let mallory: Api; // another tenant
  let eve: Api; // same tenant, another user
  let db: Connection;
  let redis: Redis;
  let signer: AssignmentSigner;

  beforeAll(async () => {
    sys = await startSystem({
      env: { LOOM_SHARED_ACL: JSON.stringify(ACL), LOOM_REDACT_STORED: 'true' },
    });
    alice = client(sys.base, sys.token('tenant-a', 'alice'));
    mallory = client(sys.base, sys.token('tenant-b', 'mallory'));
    eve = client(sys.base, sys.token('tenant-a', 'eve'));
    db = await createConnection(sys.env.MYSQL_URL);
    redis = new Redis(sys.env.REDIS_URL);
    signer = new AssignmentSigner(sys.env.LOOM_AGENT_SECRET);
  });
  afterAll(async () => {
    redis?.disconnect();
    await db?.end();
    await sys?.stop();
  });

  async function conversationWithTurn(
    api: Api = alice,
    content = 'My employment contract has a problem',
  ) {
    const id = (await api('POST', '/v1/conversations', {})).body.conversationId as string;
    const turn = await api(
      'POST',
      `/v1/conversations/${id}/messages`,
      { content },
      { 'idempotency-key': `k-${id}` },
    );
    expect(turn.status).toBe(201);
    return { id, taskId: turn.body.taskId as string, turn };
  }

  async function rows(sql: string, params: unknown[]): Promise<any[]> {
    const [r] = await db.query(sql, params);
    return r as any[];
  }

  describe('tenant isolation', () => {
    it("answers every route on another owner's ids exactly as on missing ones: status, body, headers", async () => {
      const { id, taskId } = await conversationWithTurn();
      const before = (await alice('GET', `/v1/conversations/${id}/messages`)).body.items;
      // Another tenant or user whose id differs from alice's only in case is another owner too.
      const caseTenant = client(sys.base, sys.token('TENANT-A', 'alice'));
      const caseUser = client(sys.base, sys.token('tenant-a', 'ALICE'));
      for (const attacker of [mallory, eve, caseTenant, caseUser]) {
        const requests: Array<[string, string, unknown?, Record<string, string>?]> = [
          ['GET', `/v1/conversations/${id}`],
          ['GET', `/v1/conversations/${id}/messages`],
          ['GET', `/v1/conversations/${id}/messages?afterSeq=0&limit=5`],
          ['POST', `/v1/conversations/${id}/messages`, { content: 'hijack attempt' }],
          // replaying alice's own Idempotency-Key must not hand out her TurnView
          [
            'POST',
            `/v1/conversations/${id}/messages`,
            { content: 'x' },
            { 'idempotency-key': `k-${id}` },
          ],
          ['DELETE', `/v1/conversations/${id}`],
          ['GET', `/v1/tasks/${taskId}`],
        ];
        for (const [method, path, body, headers] of requests) {
          const theirs = await attacker(method, path, body, headers);
          const missing = await attacker(
            method,
            path.replace(id, MISSING_CONV).replace(taskId, MISSING_TASK),
            body,
            headers,
          );
          expect([method, path, theirs.status]).toEqual([method, path, 404]);
          expect(theirs.body).toEqual(missing.body);
          expect(theirs.body).toEqual({
            statusCode: 404,
            code: 'NOT_FOUND',
            message: expect.any(String),
          });
          expect(headersOf(theirs)).toEqual(headersOf(missing));
        }
        // listing never shows it; claiming its id yields a fresh conversation (201, new id)
        const list = await attacker('GET', '/v1/conversations?limit=100');
        expect(
          list.body.items.map((c: { conversationId: string }) => c.conversationId),
        ).not.toContain(id);
        const hijack = await attacker('POST', '/v1/conversations', { conversationId: id });
        const fresh = await attacker('POST', '/v1/conversations', {
          conversationId: `c_${randomBytes(9).toString('hex')}`,
        });
        expect(hijack.status).toBe(201);
        expect(hijack.body.conversationId).not.toBe(id);
        expect(Object.keys(hijack.body).sort()).toEqual(Object.keys(fresh.body).sort());
        expect(hijack.body).toMatchObject({ messageCount: 0, title: null });
      }
      // alice's conversation is untouched
      expect((await alice('GET', `/v1/conversations/${id}`)).status).toBe(200);
      expect((await alice('GET', `/v1/conversations/${id}/messages`)).body.items).toEqual(before);
      expect((await alice('GET', `/v1/tasks/${taskId}`)).status).toBe(200);
    });

    it("takes as long for another owner's id as for a missing one (medians within 3x)", async () => {
      const { id } = await conversationWithTurn();
      const N = 40;
      const time = async (api: Api, path: string) => {
        const t0 = process.hrtime.bigint();
        const res = await api('GET', path);
        expect(res.status).toBe(404);
        return Number(process.hrtime.bigint() - t0) / 1e6;
      };
      const figures: string[] = [];
      for (const [who, api] of [
        ['other tenant', mallory],
        ['same tenant, other user', eve],
      ] as const) {
        const theirs: number[] = [];
        const missing: number[] = [];
        for (let i = 0; i < N; i++) {
          // alternate so drift affects both series alike
          theirs.push(await time(api, `/v1/conversations/${id}`));
          missing.push(
            await time(api, `/v1/conversations/c_missing${randomBytes(8).toString('hex')}`),
          );
        }
        const [a, b] = [median(theirs), median(missing)];
        figures.push(`${who}: median ${a.toFixed(2)} ms (theirs) vs ${b.toFixed(2)} ms (missing)`);
        expect(Math.max(a, b) / Math.min(a, b)).toBeLessThan(3);
      }
      console.log(`timing, ${N} requests each\n${figures.join('\n')}`);
    });

    it('creates a supplied id atomically: of two tenants racing for it exactly one owns it', async () => {
      for (let i = 0; i < 10; i++) {
        const id = `c_race${randomBytes(8).toString('hex')}`;
        const [a, m] = await Promise.all([
          alice('POST', '/v1/conversations', { conversationId: id }),
          mallory('POST', '/v1/conversations', { conversationId: id }),
        ]);
        expect([a.status, m.status]).toEqual([201, 201]);
        const winners = [a, m].filter((r) => r.body.conversationId === id);
        expect(winners).toHaveLength(1);
        const owner = winners[0] === a ? alice : mallory;
        const other = winners[0] === a ? mallory : alice;
        expect((await owner('GET', `/v1/conversations/${id}`)).status).toBe(200);
        expect((await other('GET', `/v1/conversations/${id}`)).status).toBe(404);
      }
      // the same user racing with itself: one creates (201), the other gets it back (200)
      const id = `c_self${randomBytes(8).toString('hex')}`;
      const both = await Promise.all([
        alice('POST', '/v1/conversations', { conversationId: id }),
        alice('POST', '/v1/conversations', { conversationId: id }),
      ]);
      expect(both.map((r) => r.status).sort()).toEqual([200, 201]);
      expect(both.map((r) => r.body.conversationId)).toEqual([id, id]);
    });
  });

  describe('signed assignments', () => {
    const stream = (agentType: string) =>
      `${sys.env.LOOM_KEY_PREFIX}rpc:{${agentExecutePattern(agentType)}}`;

    /** Publishes a request the way the transport does, but straight to Redis, and waits for the reply. */
    async function publish(
      agentType: string,
      data: unknown,
    ): Promise<{ err?: any; response?: any }> {
      const replyTo = `${sys.env.LOOM_KEY_PREFIX}rpc:reply:forger-${randomBytes(6).toString('hex')}`;
      await redis.xadd(
        stream(agentType),
        '*',
        'id',
        randomUUID(),
        'replyTo',
        replyTo,
        'deadline',
        String(Date.now() + 30_000),
        'data',
        JSON.stringify(data),
      );
      const res = await redis.xread('BLOCK', 20_000, 'STREAMS', replyTo, '0');
      expect(res).not.toBeNull();
      const fields = res![0][1][0][1];
      const rec: Record<string, string> = {};
      for (let i = 0; i < fields.length; i += 2) rec[fields[i]] = fields[i + 1];
      await redis.del(replyTo);
      return {
        err: rec.err ? JSON.parse(rec.err) : undefined,
        response: rec.response ? JSON.parse(rec.response) : undefined,
      };
    }

    async function stateRows(conversationId: string, stateKey: string) {
      return rows(
        'SELECT COUNT(*) AS n FROM loom_session_state WHERE session_id = ? AND state_key = ?',
        [conversationId, stateKey],
      ).then((r) => Number(r[0].n));
    }

    it('rejects unsigned, forged, altered and expired dispatches published straight to Redis, reading and writing nothing', async () => {
      const victim = await conversationWithTurn();
      const own = await conversationWithTurn(mallory);
      const sharedBefore = await stateRows(victim.id, `task:${victim.taskId}:shared`);
      const claimsFor = (
        c: { id: string; taskId: string },
        owner: [string, string],
      ): AssignmentClaims => ({
        tenantId: owner[0],
        userId: owner[1],
        conversationId: c.id,
        taskId: c.taskId,
        agentSessionId: `a_forged${randomBytes(8).toString('hex')}`,
        agentType: 'labor-law',
        expiresAt: Date.now() + 60_000,
      });
      const victimClaims = claimsFor(victim, ['tenant-a', 'alice']);
      const mallorysOwn = signer.sign(claimsFor(own, ['tenant-b', 'mallory']));
      const cases: Array<[string, unknown, string, string]> = [
        // well-formed but never signed (the shape check lets it through to the guard)
        [
          'unsigned',
          { ...victimClaims, signature: '0'.repeat(64) },
          'ASSIGNMENT_REJECTED',
          'bad assignment signature',
        ],
        [
          'forged',
          { ...victimClaims, signature: randomBytes(32).toString('hex') },
          'ASSIGNMENT_REJECTED',
          'bad assignment signature',
        ],
        [
          // mallory's own valid assignment, pointed at alice's conversation
          'altered',
          {
            ...mallorysOwn,
            tenantId: 'tenant-a',
            userId: 'alice',
            conversationId: victim.id,
            taskId: victim.taskId,
          },
          'ASSIGNMENT_REJECTED',
          'bad assignment signature',
        ],
        [
          // a genuine assignment for alice's task, replayed after it expired
          'expired',
          signer.sign({ ...victimClaims, expiresAt: Date.now() - 1000 }),
          'ASSIGNMENT_REJECTED',
          'assignment expired',
        ],
        [
          // signed for another agent type, sent to labor-law
          'other agent type',
          signer.sign({ ...victimClaims, agentType: 'contract-law' }),
          'ASSIGNMENT_REJECTED',
          'assignment is for another agent type',
        ],
        // no signature at all: malformed before it is even checked
        ['no signature', { ...victimClaims }, 'VALIDATION_FAILED', 'invalid payload: assignment'],
      ];
      for (const [name, assignment, code, reason] of cases) {
        const correlationId = `forged-${name.replace(/ /g, '-')}-${randomBytes(4).toString('hex')}`;
        const reply = await publish('labor-law', {
          assignment,
          meta: { correlationId },
          language: 'en',
        });
        expect([name, reply.err]).toEqual([name, { code, message: reason }]);
        expect(reply.response).toBeUndefined();
        const sid = (assignment as AssignmentClaims).agentSessionId;
        // nothing written: no agent session (MySQL or Redis), no shared-context write
        expect(await stateRows(victim.id, `agent:${sid}`)).toBe(0);
        expect(await redis.exists(`${sys.env.LOOM_KEY_PREFIX}s:{${victim.id}}:agent:${sid}`)).toBe(
          0,
        );
        expect(await stateRows(victim.id, `task:${victim.taskId}:shared`)).toBe(sharedBefore);
        // the agent logged the rejection, and nothing after it for that request
        const lines = sys.logs().filter((l) => l.json?.correlationId === correlationId);
        expect(lines.map((l) => [l.app, l.json!.msg, l.json!.reason])).toEqual([
          [
            'labor-law-agent',
            code === 'ASSIGNMENT_REJECTED' ? 'assignment rejected' : 'execution rejected',
            reason,
          ],
        ]);
        expect(lines[0].json).toMatchObject({ level: 'warn', agentType: 'labor-law' });
        expect(lines[0].json).not.toHaveProperty('conversationId');
      }
      // control: the same request with a valid assignment gets past the guard (the signature is
      // what decides); the runner then refuses work on a task that has already completed
      const genuine = signer.sign({
        ...victimClaims,
        agentSessionId: `a_genuine${randomBytes(8).toString('hex')}`,
      });
      const ok = await publish('labor-law', {
        assignment: genuine,
        meta: { correlationId: 'genuine-1' },
        language: 'en',
      });
      expect(ok.err?.code).not.toBe('ASSIGNMENT_REJECTED');
      expect(
        sys
          .logs()
          .filter(
            (l) => l.json?.correlationId === 'genuine-1' && l.json?.msg === 'assignment rejected',
          ),
      ).toEqual([]);
    });

    it('answers fuzzed payloads on every agent pattern with a typed error, never a crash', async () => {
      const rpc = new RedisStreamsClient({
        redisUrl: sys.env.REDIS_URL,
        keyPrefix: sys.env.LOOM_KEY_PREFIX,
        timeoutMs: 15_000,
      });
      await rpc.connect();
      try {
        const { id, taskId } = await conversationWithTurn();
        const base: AssignmentClaims = {
          tenantId: 'tenant-a',
          userId: 'alice',
          conversationId: id,
          taskId,
          agentSessionId: `a_fuzz${randomBytes(8).toString('hex')}`,
          agentType: 'labor-law',
          expiresAt: Date.now() + 60_000,
        };
        for (const agentType of ['labor-law', 'contract-law', 'legal-research']) {
          // what the client refuses to send goes straight to the stream
          for (const raw of [null, 'string', 42, []])
            expect((await publish(agentType, raw)).err).toMatchObject({
              code: 'VALIDATION_FAILED',
            });
          const payloads: unknown[] = ['string', 42, [], {}, { meta: { correlationId: '\u0000' } }];
          for (const bad of FUZZ) {
            for (const field of [
              'conversationId',
              'taskId',
              'agentSessionId',
              'tenantId',
            ] as const) {
              // signed with the real secret, so the payload validation is what must catch it
              payloads.push({
                assignment: signer.sign({ ...base, agentType, [field]: bad }),
                meta: { correlationId: 'fuzz' },
              });
            }
            payloads.push({
              assignment: { ...base, agentType, conversationId: bad, signature: bad },
              meta: { correlationId: bad },
            });
          }
          const untyped: unknown[] = [];
          for (const payload of payloads) {
            const err = await firstValueFrom(
              rpc.send(agentExecutePattern(agentType), payload),
            ).then(
              (ok) => ({ ok }),
              (e: unknown) => e as { code?: string },
            );
            // a well-formed but unknown signed id (e.g. tenant "short") reads as NOT_FOUND
            if (
              !['ASSIGNMENT_REJECTED', 'VALIDATION_FAILED', 'NOT_FOUND'].includes(
                (err as { code?: string }).code ?? '',
              )
            )
              untyped.push({ payload: JSON.stringify(payload).slice(0, 300), err });
          }
          expect(untyped).toEqual([]);
          const health = await firstValueFrom(
            rpc.send(`agent.${agentType}.health`, { junk: FUZZ }),
          );
          expect(health).toEqual({ status: 'ok', agentType });
        }
      } finally {
        await rpc.close();
      }
      // every agent is still up
      expect(sys.children.every((c) => c.exitCode === null)).toBe(true);
    });
  });

  describe('shared-context ACL', () => {
    it('fails a protected key written by the wrong agent, typed and audited; the turn still answers', async () => {
      const { id } = await conversationWithTurn(alice, '我跟公司签的劳动合同有问题');
      // a follow-up: LOOM_SHARED_ACL lets only labor-law write research.statutes here
      const t2 = await alice('POST', `/v1/conversations/${id}/messages`, {
        content: '上面那份合同里关于竞业协议的部分怎么看?',
      });
      expect(t2.status).toBe(201);
      expect(t2.body.reply.agentType).toBe('labor-law');
      const task = (await alice('GET', `/v1/tasks/${t2.body.taskId}`)).body;
      expect(task.taskType).toBe('follow-up');
      const research = task.executions.find(
        (e: { agentType: string }) => e.agentType === 'legal-research',
      );
      expect(research).toMatchObject({ status: 'FAILED', error: { code: 'ACCESS_DENIED' } });
      expect(task.sharedContext).not.toHaveProperty('research.statutes');

      const audit = (
        await rows(
          "SELECT state_data FROM loom_session_state WHERE session_id = ? AND state_key = 'audit' ORDER BY item_index",
          [id],
        )
      ).map((r) => JSON.parse(r.state_data));
      expect(audit).toEqual([
        {
          at: expect.any(String),
          taskId: t2.body.taskId,
          agentType: 'legal-research',
          key: 'research.statutes',
          decision: 'DENIED',
          previousWriter: null,
        },
      ]);
      const warn = sys
        .logs()
        .find(
          (l) => l.json?.msg === 'shared-context write denied' && l.json?.taskId === t2.body.taskId,
        );
      expect(warn?.app).toBe('legal-research-agent');
      expect(warn?.json).toMatchObject({
        level: 'warn',
        key: 'research.statutes',
        writer: 'legal-research',
        conversationId: id,
        agentType: 'legal-research',
      });
      // the audit trail is tenant-scoped like everything else and goes with the conversation
      expect((await alice('DELETE', `/v1/conversations/${id}`)).status).toBe(204);
      expect(
        await rows(
          "SELECT 1 FROM loom_session_state WHERE session_id = ? AND state_key = 'audit'",
          [id],
        ),
      ).toHaveLength(0);
    });
  });

  describe('PII', () => {
    it('redacts user messages before they are stored when LOOM_REDACT_STORED=true, and metadata always', async () => {
      const pii = ['john.doe@example.com', '4111 1111 1111 1111', '13800138000'];
      const conv = await alice('POST', '/v1/conversations', {
        metadata: { source: 'import', contact: 'john.doe@example.com' },
      });
      const id = conv.body.conversationId;
      const turn = await alice('POST', `/v1/conversations/${id}/messages`, {
        content: `My employment contract has a problem. Mail john.doe@example.com, card 4111 1111 1111 1111, phone 13800138000`,
      });
      expect(turn.status).toBe(201);
      expect(turn.body.userMessage.content).toContain('[REDACTED_EMAIL]');
      expect(turn.body.userMessage.content).toContain('[REDACTED_CARD]');
      const stored = await rows(
        'SELECT state_key, state_data FROM loom_session_state WHERE session_id = ?',
        [id],
      );
      expect(stored.length).toBeGreaterThan(3);
      for (const row of stored)
        for (const v of pii)
          expect([row.state_key, row.state_data]).not.toContainEqual(expect.stringContaining(v));
      const view = await alice('GET', `/v1/conversations/${id}`);
      for (const v of pii) expect(JSON.stringify(view.body)).not.toContain(v);
    });

    it('checks the size and the Idempotency-Key of the message as sent, not as redacted', async () => {
      const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
      const send = (content: string, key: string) =>
        alice('POST', `/v1/conversations/${id}/messages`, { content }, { 'idempotency-key': key });
      const first = await send('劳动合同 password=hunter2hunter2 mail a.b@example.com', 'pii-k');
      expect(first.status).toBe(201);
      // Another message that redacts to the same text is another message: 409, not the first turn.
      const other = await send('劳动合同 password=OTHERPASS99 mail z.z@example.com', 'pii-k');
      expect([other.status, other.body.code]).toEqual([409, 'CONFLICT']);
      // 32,000 characters as sent, longer once each address is [REDACTED_EMAIL]: within the limit.
      const emails = ' x@y.cn'.repeat(32_000 / 7).padEnd(32_000, '.');
      const long = await send(emails, 'pii-long');
      expect(long.status).toBe(201);
      expect(long.body.userMessage.content).toContain('[REDACTED_EMAIL]');
      const messages = await alice('GET', `/v1/conversations/${id}/messages`);
      expect(messages.body.items.filter((m: { role: string }) => m.role === 'user')).toHaveLength(
        2,
      );
    });
  });

  describe('input hardening', () => {
    it('answers fuzzed ids on every route with 400 INVALID_ID, never 500', async () => {
      const { id } = await conversationWithTurn();
      for (const bad of FUZZ) {
        const enc = encodeURIComponent(bad);
        for (const [method, path, body] of [
          ['GET', `/v1/conversations/${enc}`],
          ['DELETE', `/v1/conversations/${enc}`],
          ['GET', `/v1/conversations/${enc}/messages`],
          ['POST', `/v1/conversations/${enc}/messages`, { content: 'hello' }],
          ['GET', `/v1/tasks/${enc}`],
          ['POST', '/v1/conversations', { conversationId: bad }],
        ] as const) {
          const res = await alice(method, path, body);
          expect([method, path.slice(0, 60), res.status, res.body?.code]).toEqual([
            method,
            path.slice(0, 60),
            400,
            'INVALID_ID',
          ]);
        }
        // unencoded in the path: whatever route it lands on, a typed 4xx
        const raw = await alice('GET', `/v1/conversations/${bad.split('\u0000').join('%00')}`);
        expect(raw.status).toBeGreaterThanOrEqual(400);
        expect(raw.status).toBeLessThan(500);
        expect(raw.body).toMatchObject({ code: expect.any(String) });
        const cursor = await alice('GET', `/v1/conversations?cursor=${enc}`);
        expect(cursor.status).toBe(400);
      }
      const idem = await alice(
        'POST',
        `/v1/conversations/${id}/messages`,
        { content: 'x' },
        { 'idempotency-key': 'k'.repeat(201) },
      );
      expect(idem.body).toMatchObject({ statusCode: 400, code: 'VALIDATION_FAILED' });
      const badPercent = await alice('GET', '/v1/conversations/%E0%A4%A');
      expect(badPercent.status).toBe(400);
    });

    it('limits JSON depth to 32 (400 VALIDATION_FAILED) and body size to 384 KB (413)', async () => {
      const nest = (n: number): unknown => (n === 0 ? 1 : { a: nest(n - 1) });
      // body {metadata: …}: the body is level 1, metadata 2 …
      const ok = await alice('POST', '/v1/conversations', { metadata: nest(30) });
      expect(ok.status).toBe(201);
      const deep = await alice('POST', '/v1/conversations', { metadata: nest(32) });
      expect(deep.body).toEqual({
        statusCode: 400,
        code: 'VALIDATION_FAILED',
        message: 'JSON body nests deeper than 32 levels',
      });
      const bomb = await alice(
        'POST',
        '/v1/conversations',
        '['.repeat(100_000) + ']'.repeat(100_000),
      );
      expect(bomb.body).toMatchObject({ statusCode: 400, code: 'VALIDATION_FAILED' });
      const big = await alice('POST', '/v1/conversations', {
        metadata: { x: 'y'.repeat(400_000) },
      });
      expect(big.body).toMatchObject({ statusCode: 413, code: 'PAYLOAD_TOO_LARGE' });
    });

    it('never echoes secrets or stack traces in errors', async () => {
      const secret = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc';
      const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
      const tokens = [
        `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub: 'x', tid: 'y', apiKey: secret })}.${secret}`,
        `${secret}.${secret}`,
        secret,
        `${b64({ alg: 'none' })}.${b64({ sub: secret, tid: 'y' })}.`,
      ];
      const answers: Answer[] = [];
      for (const t of tokens) answers.push(await client(sys.base, t)('GET', '/v1/conversations'));
      const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
      answers.push(
        await alice('POST', `/v1/conversations/${id}/messages`, { content: 'x', [secret]: 1 }),
      );
      answers.push(
        await alice('POST', `/v1/conversations/${id}/messages`, { content: { password: secret } }),
      );
      answers.push(
        await alice('POST', `/v1/conversations/${id}/messages`, `{"content": "${secret}`),
      );
      answers.push(await alice('POST', '/v1/conversations', { conversationId: secret + '!' }));
      for (const a of answers) {
        expect(a.status).toBeGreaterThanOrEqual(400);
        expect(Object.keys(a.body).sort()).toEqual(['code', 'message', 'statusCode']);
        const text = JSON.stringify(a.body) + JSON.stringify([...a.headers.entries()]);
        expect(text).not.toContain(secret);
        expect(text).not.toMatch(/\n\s+at |\.ts:\d+|\.js:\d+|node_modules/);
      }
      expect(answers.slice(0, 4).map((a) => a.body.code)).toEqual(Array(4).fill('UNAUTHENTICATED'));
      // and none of it reached a log line either
      expect(sys.logs().filter((l) => l.line.includes(secret))).toEqual([]);
    });
  });
});

/** Ids that must never reach a key, path or query: traversal, encoded traversal, glob, braces, colon, NUL, 10 KB. */
const FUZZ = [
  '../',
  '../../etc/passwd',
  '%2e%2e/',
  '..%2F..%2F',
  '*',
  'c_abcdefgh*',
  '{c_abcdefgh}',
  '{',
  ':',
  'c_abc:defgh',
  '\u0000',
  'c_abcdefgh\u0000x',
  'x'.repeat(10 * 1024),
  "c_abc'; DROP TABLE loom_session_state; --",
  'short',
];
