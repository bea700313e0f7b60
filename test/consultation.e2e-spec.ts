import Redis from 'ioredis';
import { TEST_REDIS_URL } from '@loom/testing';
import { client, RunningSystem, startSystem, streamTurn } from './system';

/** The whole path as separate processes on real Redis and MySQL (DESIGN.md §6, API.md demo). */
describe('system: a multi-turn consultation keeps its context across services', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;
  let mallory: ReturnType<typeof client>;

  beforeAll(async () => {
    sys = await startSystem();
    alice = client(sys.base, sys.token('tenant-a', 'alice'));
    mallory = client(sys.base, sys.token('tenant-b', 'mallory'));
  });
  afterAll(() => sys?.stop());

  it('routes the follow-up to labor-law, which sees the first turn; survives a restart of every process', async () => {
    const conv = await alice('POST', '/v1/conversations', {});
    expect(conv.status).toBe(201);
    const id = conv.body.conversationId;
    const t1 = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    expect(t1.status).toBe(201);
    expect(t1.body.reply.agentType).toBe('labor-law');
    expect([t1.body.userMessage.seq, t1.body.reply.seq]).toEqual([1, 2]);

    const t2 = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '上面那份合同里关于竞业协议的部分怎么看?',
    });
    expect(t2.body.reply.agentType).toBe('labor-law');
    const task = await alice('GET', `/v1/tasks/${t2.body.taskId}`);
    const labor = task.body.executions.find(
      (e: { agentType: string }) => e.agentType === 'labor-law',
    );
    expect(labor.context.historyMessages).toBe(2);
    expect(labor.context.sharedKeys).toEqual(['research.statutes']);
    expect(task.body.sharedContext['research.statutes'].writer).toBe('legal-research');
    expect(t2.body.reply.content).toContain('我跟公司签的劳动合同有问题');

    await sys.restart();
    const t3 = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '那竞业限制最长多久?',
    });
    expect(t3.body.reply.agentType).toBe('labor-law');
    const task3 = await alice('GET', `/v1/tasks/${t3.body.taskId}`);
    expect(
      task3.body.executions.find((e: { agentType: string }) => e.agentType === 'labor-law').context
        .historyMessages,
    ).toBe(4);
    const msgs = await alice('GET', `/v1/conversations/${id}/messages`);
    expect(msgs.body.items.map((m: { seq: number }) => m.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    const view = await alice('GET', `/v1/conversations/${id}`);
    expect(view.body).toMatchObject({
      messageCount: 6,
      currentIntent: 'labor-law',
      status: 'ACTIVE',
    });
    expect(view.body.title.length).toBeGreaterThan(0);
  });

  it('sends a lease question to contract-law and English the same way', async () => {
    const c = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const lease = await alice('POST', `/v1/conversations/${c}/messages`, {
      content: '我租房的租赁合同到期了，房东不退押金怎么办',
    });
    expect(lease.body.reply.agentType).toBe('contract-law');
    const e = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    await alice('POST', `/v1/conversations/${e}/messages`, {
      content: 'My employment contract with my company has a problem',
    });
    const f = await alice('POST', `/v1/conversations/${e}/messages`, {
      content: 'What about the non-compete clause in that contract?',
    });
    expect(f.body.reply.agentType).toBe('labor-law');
  });

  it('answers another tenant exactly as a missing conversation, and never adopts its id', async () => {
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const t = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: 'My employment contract has a problem',
    });
    const missing = 'c_doesnotexist0000000000';
    for (const [method, path, body] of [
      ['GET', `/v1/conversations/${id}`],
      ['GET', `/v1/conversations/${id}/messages`],
      ['POST', `/v1/conversations/${id}/messages`, { content: 'hi there' }],
      ['DELETE', `/v1/conversations/${id}`],
    ] as const) {
      const theirs = await mallory(method, path, body);
      const none = await mallory(method, path.replace(id, missing), body);
      expect(theirs.status).toBe(404);
      expect(theirs.body).toEqual(none.body);
    }
    const task = await mallory('GET', `/v1/tasks/${t.body.taskId}`);
    expect(task.status).toBe(404);
    expect(task.body).toEqual((await mallory('GET', '/v1/tasks/t_doesnotexist000000000')).body);
    const hijack = await mallory('POST', '/v1/conversations', { conversationId: id });
    expect(hijack.status).toBe(201);
    expect(hijack.body.conversationId).not.toBe(id);
    const list = await mallory('GET', '/v1/conversations');
    expect(list.body.items.map((c: { conversationId: string }) => c.conversationId)).not.toContain(
      id,
    );
    expect((await alice('GET', `/v1/conversations/${id}`)).status).toBe(200);
  });

  it('gives typed 4xx errors for bad requests', async () => {
    const anon = client(sys.base, null);
    expect((await anon('GET', '/v1/conversations')).body).toMatchObject({
      statusCode: 401,
      code: 'UNAUTHENTICATED',
    });
    const forged = client(sys.base, sys.token('tenant-a', 'alice').slice(0, -3) + 'abc');
    expect((await forged('GET', '/v1/conversations')).status).toBe(401);
    expect((await alice('GET', '/v1/conversations/..%2F..%2Fetc')).body).toMatchObject({
      statusCode: 400,
      code: 'INVALID_ID',
    });
    expect((await alice('GET', '/v1/tasks/short')).body).toMatchObject({
      statusCode: 400,
      code: 'INVALID_ID',
    });
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    expect((await alice('POST', `/v1/conversations/${id}/messages`, {})).body).toMatchObject({
      statusCode: 400,
      code: 'VALIDATION_FAILED',
    });
    expect(
      (await alice('POST', `/v1/conversations/${id}/messages`, '{"content": ')).body,
    ).toMatchObject({ statusCode: 400, code: 'VALIDATION_FAILED' });
    expect(
      (await alice('POST', `/v1/conversations/${id}/messages`, { content: 'x'.repeat(32_001) }))
        .body,
    ).toMatchObject({ statusCode: 413, code: 'PAYLOAD_TOO_LARGE' });
    expect(
      (await alice('POST', `/v1/conversations/${id}/messages`, { content: 'x'.repeat(300_000) }))
        .body,
    ).toMatchObject({ statusCode: 413, code: 'PAYLOAD_TOO_LARGE' });
    expect(
      (await alice('POST', '/v1/conversations', { conversationId: '../x' })).body,
    ).toMatchObject({ statusCode: 400 });
    expect((await alice('GET', '/v1/conversations?limit=1000')).status).toBe(400);
    const msgs = await alice('GET', `/v1/conversations/${id}/messages`);
    expect(msgs.body.items).toEqual([]);
  });

  it('returns the first TurnView for a retried Idempotency-Key and adds nothing; streams with SSE', async () => {
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const first = await alice(
      'POST',
      `/v1/conversations/${id}/messages`,
      { content: '公司拖欠工资怎么办' },
      { 'idempotency-key': 'retry-1' },
    );
    const again = await alice(
      'POST',
      `/v1/conversations/${id}/messages`,
      { content: '公司拖欠工资怎么办' },
      { 'idempotency-key': 'retry-1' },
    );
    expect(again.body).toEqual(first.body);
    expect((await alice('GET', `/v1/conversations/${id}/messages`)).body.items).toHaveLength(2);
    // The same key with another message is a client bug, not a retry: refused, nothing added.
    const reused = await alice(
      'POST',
      `/v1/conversations/${id}/messages`,
      { content: '那加班费呢?' },
      { 'idempotency-key': 'retry-1' },
    );
    expect(reused.status).toBe(409);
    expect(reused.body.code).toBe('CONFLICT');
    expect((await alice('GET', `/v1/conversations/${id}/messages`)).body.items).toHaveLength(2);
    const { deltas: events, done } = await streamTurn(
      sys.base,
      sys.token('tenant-a', 'alice'),
      id,
      '那加班费呢?',
    );
    expect(events.join('')).toBe(done.reply.content);
    // The deltas came live from the agent's model through Redis, in the model's own pieces, not
    // cut from the stored reply (which a replay sends in 8 even pieces); the stream the agent
    // published them on is gone once read.
    const chars = Array.from(done.reply.content as string);
    const size = Math.max(8, Math.ceil(chars.length / 8));
    const even = Array.from({ length: Math.ceil(chars.length / size) }, (_, i) =>
      chars.slice(i * size, (i + 1) * size).join(''),
    );
    expect(events.length).toBeGreaterThan(1);
    expect(events).not.toEqual(even);
    const task = await alice('GET', `/v1/tasks/${done.taskId}`);
    const labor = task.body.executions.find(
      (e: { agentType: string }) => e.agentType === 'labor-law',
    );
    const redis = new Redis(TEST_REDIS_URL);
    const key = `${sys.env.LOOM_KEY_PREFIX}deltas:{${id}}:${labor.agentSessionId}`;
    const left = await redis.exists(key);
    redis.disconnect();
    expect(left).toBe(0);
    expect(done.reply.seq).toBe(4);
    expect((await alice('GET', `/v1/conversations/${id}/messages`)).body.items).toHaveLength(4);
  });

  it('deletes a conversation everywhere', async () => {
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const t = await alice('POST', `/v1/conversations/${id}/messages`, { content: '劳动合同问题' });
    expect((await alice('DELETE', `/v1/conversations/${id}`)).status).toBe(204);
    expect((await alice('GET', `/v1/conversations/${id}`)).status).toBe(404);
    expect((await alice('GET', `/v1/tasks/${t.body.taskId}`)).status).toBe(404);
  });
});
