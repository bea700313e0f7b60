import { PrivateRedisCluster } from '@loom/testing';
import { client, RunningSystem, startSystem, streamTurn } from './system';

/**
 * The consultation of consultation.e2e-spec.ts with every app on a Redis Cluster of its own
 * (REDIS_CLUSTER_NODES, three masters) and a database of its own: routing, history and order
 * hold, and what the turns wrote and sent lies on several masters, so the cluster is exercised.
 */
describe('system: a consultation on Redis Cluster', () => {
  let cluster: PrivateRedisCluster;
  let sys: RunningSystem;
  let alice: ReturnType<typeof client>;

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    sys = await startSystem({
      env: { REDIS_URL: cluster.url, REDIS_CLUSTER_NODES: cluster.seeds.join(',') },
    });
    alice = client(sys.base, sys.token('tenant-a', 'alice'));
  });
  afterAll(async () => {
    await sys?.stop();
    await cluster?.stop(); // the keys go with it
  });

  it('routes the follow-up to labor-law, which sees the first turn, with the keys spread over the masters', async () => {
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const t1 = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '我跟公司签的劳动合同有问题',
    });
    expect(t1.status).toBe(201);
    expect(t1.body.reply.agentType).toBe('labor-law');
    expect([t1.body.userMessage.seq, t1.body.reply.seq]).toEqual([1, 2]);

    // Streamed: the deltas come through a stream of the conversation's slot.
    const { deltas, done } = await streamTurn(
      sys.base,
      sys.token('tenant-a', 'alice'),
      id,
      '上面那份合同里关于竞业协议的部分怎么看?',
    );
    expect(deltas.join('')).toBe(done.reply.content);
    expect(done.reply.agentType).toBe('labor-law');
    expect(done.reply.content).toContain('我跟公司签的劳动合同有问题');
    const task = await alice('GET', `/v1/tasks/${done.taskId}`);
    const labor = task.body.executions.find(
      (e: { agentType: string }) => e.agentType === 'labor-law',
    );
    expect(labor.context.historyMessages).toBe(2);
    expect(task.body.sharedContext['research.statutes'].writer).toBe('legal-research');

    const msgs = await alice('GET', `/v1/conversations/${id}/messages`);
    expect(msgs.body.items.map((m: { seq: number }) => m.seq)).toEqual([1, 2, 3, 4]);
    expect((await alice('GET', `/v1/conversations/${id}`)).body).toMatchObject({
      messageCount: 4,
      currentIntent: 'labor-law',
    });

    // The conversation's own keys share its hash tag, so one master holds them all; the rest of
    // what its turns used (task sessions, the agents' request streams, the registry) lies on
    // the other masters too.
    const prefix = sys.env.LOOM_KEY_PREFIX;
    const byMaster = [...(await cluster.keysByMaster(prefix)).values()];
    const holding = (match: (key: string) => boolean) =>
      byMaster.filter((keys) => keys.some(match)).length;
    expect(holding((k) => k.startsWith(`${prefix}s:{${id}}:`))).toBe(1);
    expect(holding((k) => k.startsWith(`${prefix}rpc:{agent.`))).toBeGreaterThan(1);
    expect(holding(() => true)).toBe(3);
  });

  it('sends a lease question to contract-law and deletes a conversation everywhere', async () => {
    const c = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const lease = await alice('POST', `/v1/conversations/${c}/messages`, {
      content: '我租房的租赁合同到期了，房东不退押金怎么办',
    });
    expect(lease.body.reply.agentType).toBe('contract-law');
    expect((await alice('DELETE', `/v1/conversations/${c}`)).status).toBe(204);
    expect((await alice('GET', `/v1/conversations/${c}`)).status).toBe(404);
    expect((await alice('GET', `/v1/tasks/${lease.body.taskId}`)).status).toBe(404);
  });

  it('logged no warning or error: no command refused for its slots, no script reaching another', () => {
    const quiet = new Set(['info', 'debug', 'trace']);
    const loud = sys.logs().filter((l) => !l.json || !quiet.has(l.json.level as string));
    expect(loud.map((l) => `${l.app}: ${l.line}`)).toEqual([]);
  });
});
