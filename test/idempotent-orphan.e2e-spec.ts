import {
  contiguous,
  failWritesAfterMessage,
  storedMessages,
  waitFor,
  WENT_ON_CONFLICT,
} from './faults.support';
import { client, RunningSystem, startSystem } from './system';

const UNAVAILABLE = {
  statusCode: 503,
  code: 'UNAVAILABLE',
  message: 'the durable store is unavailable',
};

/**
 * A keyed turn that fails after storing its user message and before writing its task (MySQL
 * drops right after the message's commit) answers 503, and the client retries with the same
 * Idempotency-Key as told: the retry adopts that message rather than storing it again, and
 * answers 201 with the reply stored once. MySQL fails for real (a trigger on the suite's own
 * database); every app is a real process.
 */
describe('system: a same-key retry after a turn stopped between its user message and its task', () => {
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;
  const post = (id: string, content: string, key?: string) =>
    alice(
      'POST',
      `/v1/conversations/${id}/messages`,
      { content },
      key ? { 'Idempotency-Key': key } : {},
    );
  const stored = async (id: string) =>
    (await storedMessages(sys.env.MYSQL_URL, id)).map((m) => [m.seq, m.role, m.content]);
  /** A conversation with one turn answered (seqs 1 and 2). */
  const conversation = async () => {
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId as string;
    expect((await post(id, '我跟公司签的劳动合同有问题')).status).toBe(201);
    return id;
  };

  beforeAll(async () => {
    sys = await startSystem();
    alice = client(sys.base, sys.token('tenant-o', 'alice'));
  });
  afterAll(async () => {
    await sys?.stop();
  });

  it.each([
    ['every write after the user message', '%'],
    ['the task document, after its reference and the conversation', 'task:%'],
  ])(
    'stores the user message once and answers the retry 201 when MySQL failed %s',
    async (_, keys) => {
      const id = await conversation();
      const lift = await failWritesAfterMessage(sys.env.MYSQL_URL, id, 3, keys);
      const question = '上面那份合同里关于竞业协议的部分怎么看?';
      const first = await post(id, question, 'k-orphan');
      await lift();
      expect([first.status, first.body]).toEqual([503, UNAVAILABLE]);
      const [orphan] = (await storedMessages(sys.env.MYSQL_URL, id)).slice(2);
      expect([orphan.seq, orphan.role, orphan.content]).toEqual([3, 'user', question]);

      const retry = await post(id, question, 'k-orphan');
      expect(retry.status).toBe(201);
      expect(retry.body).toMatchObject({
        taskId: orphan.taskId,
        agents: expect.arrayContaining(['labor-law']),
        userMessage: { seq: 3, role: 'user', content: question },
        reply: { seq: 4, role: 'assistant', agentType: 'labor-law' },
      });
      const messages = await storedMessages(sys.env.MYSQL_URL, id);
      expect(messages.map((m) => [m.seq, m.role, m.taskId])).toEqual([
        [1, 'user', messages[0].taskId],
        [2, 'assistant', messages[0].taskId],
        [3, 'user', orphan.taskId],
        [4, 'assistant', orphan.taskId],
      ]);
      expect(contiguous(messages)).toBe(true);
      const task = (await alice('GET', `/v1/tasks/${orphan.taskId}`)).body;
      expect([task.status, task.userIntent]).toEqual(['COMPLETED', question]);
      const meta = (await alice('GET', `/v1/conversations/${id}`)).body;
      expect([meta.messageCount, meta.activeTaskIds]).toEqual([4, []]);

      // Done: the key answers the same TurnView again and stores nothing.
      const again = await post(id, question, 'k-orphan');
      expect([again.status, again.body]).toEqual([201, retry.body]);
      expect(await storedMessages(sys.env.MYSQL_URL, id)).toHaveLength(4);
    },
  );

  it('answers 409 once a later message followed the stored one, and stores nothing', async () => {
    const id = await conversation();
    const lift = await failWritesAfterMessage(sys.env.MYSQL_URL, id, 3);
    const first = await post(id, '加班费怎么算', 'k-gone-on');
    await lift();
    expect([first.status, first.body]).toEqual([503, UNAVAILABLE]);
    // A turn without the key: its message follows the one left without a reply.
    expect((await post(id, '年假有几天')).status).toBe(201);

    const retry = await post(id, '加班费怎么算', 'k-gone-on');
    expect([retry.status, retry.body]).toEqual([409, WENT_ON_CONFLICT]);
    expect((await stored(id)).slice(2)).toEqual([
      [3, 'user', '加班费怎么算'],
      [4, 'user', '年假有几天'],
      [5, 'assistant', expect.any(String)],
    ]);
    // A different message under the key is 409 as ever.
    const changed = await post(id, '别的问题', 'k-gone-on');
    expect([changed.status, changed.body.message]).toEqual([
      409,
      'this Idempotency-Key was already used for a different message',
    ]);
    expect(await storedMessages(sys.env.MYSQL_URL, id)).toHaveLength(5);
  });

  it('stores the message once when MySQL failed before it was stored, the conversation going on or not', async () => {
    const id = await conversation();
    // The message's own insert fails; the key's entry, written before it, stands.
    let lift = await failWritesAfterMessage(sys.env.MYSQL_URL, id, 2, 'messages');
    const first = await post(id, '试用期被辞退有补偿吗', 'k-unstored');
    await lift();
    expect([first.status, first.body]).toEqual([503, UNAVAILABLE]);
    expect(await storedMessages(sys.env.MYSQL_URL, id)).toHaveLength(2);
    const retry = await post(id, '试用期被辞退有补偿吗', 'k-unstored');
    expect([retry.status, retry.body.userMessage.seq, retry.body.reply.seq]).toEqual([201, 3, 4]);

    lift = await failWritesAfterMessage(sys.env.MYSQL_URL, id, 4, 'messages');
    expect((await post(id, '经济补偿怎么算', 'k-later')).status).toBe(503);
    await lift();
    // Another turn takes the seq the failed one had been given.
    expect((await post(id, '年假有几天')).status).toBe(201);
    const later = await post(id, '经济补偿怎么算', 'k-later');
    expect([later.status, later.body.userMessage.seq, later.body.reply.seq]).toEqual([201, 7, 8]);
    const messages = await storedMessages(sys.env.MYSQL_URL, id);
    expect(messages.slice(2).map((m) => [m.seq, m.role, m.content.slice(0, 7)])).toEqual([
      [3, 'user', '试用期被辞退有'],
      [4, 'assistant', expect.any(String)],
      [5, 'user', '年假有几天'],
      [6, 'assistant', expect.any(String)],
      [7, 'user', '经济补偿怎么算'],
      [8, 'assistant', expect.any(String)],
    ]);
    expect(contiguous(messages)).toBe(true);
  });
});

/**
 * The same with the orchestrator killed (SIGKILL, a test hook) right after it stored the user
 * message: the client's connection drops, and its retry with the same key on the orchestrator
 * started again is answered 201 with the message stored once. No task names the dead turn's
 * conversation lock, so the retry runs once that lock is taken over (its holder's liveness key
 * has lapsed) or has expired.
 */
describe('system: a same-key retry after the orchestrator was killed right after the user message', () => {
  let sys: RunningSystem;

  beforeAll(async () => {
    sys = await startSystem({
      appEnv: { orchestrator: { LOOM_TEST_KILL_AFTER_USER_MESSAGE: 'true' } },
    });
  });
  afterAll(async () => {
    await sys?.stop();
  });

  it('stores the user message once and answers the retry 201', async () => {
    const alice = client(sys.base, sys.token('tenant-k', 'alice'));
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId as string;
    const question = '我跟公司签的劳动合同有问题';
    const post = () =>
      alice(
        'POST',
        `/v1/conversations/${id}/messages`,
        { content: question },
        {
          'Idempotency-Key': 'k-killed',
        },
      );
    await expect(post()).rejects.toThrow('fetch failed');
    const [killed] = sys.processes('orchestrator');
    await waitFor(() => killed.signalCode === 'SIGKILL', { what: 'the orchestrator to die' });
    await sys.kill(killed);
    const [orphan] = await storedMessages(sys.env.MYSQL_URL, id);
    expect([orphan.seq, orphan.role, orphan.content]).toEqual([1, 'user', question]);

    sys.start('orchestrator', { LOOM_TEST_KILL_AFTER_USER_MESSAGE: 'false' });
    await sys.ready();
    let retry: Awaited<ReturnType<typeof post>> | undefined;
    await waitFor(
      async () => {
        retry = await post();
        // Until the dead turn's lock is taken over or lapses: 409 after the 10 s lock wait.
        return retry.body?.message !== 'the conversation is busy with another turn';
      },
      { what: "the dead turn's lock to lapse", timeoutMs: 90_000 },
    );
    expect(retry!.status).toBe(201);
    expect(retry!.body).toMatchObject({
      taskId: orphan.taskId,
      userMessage: { seq: 1, role: 'user', content: question },
      reply: { seq: 2, role: 'assistant', agentType: 'labor-law' },
    });
    const messages = await storedMessages(sys.env.MYSQL_URL, id);
    expect(messages.map((m) => [m.seq, m.role, m.taskId])).toEqual([
      [1, 'user', orphan.taskId],
      [2, 'assistant', orphan.taskId],
    ]);
  });
});
