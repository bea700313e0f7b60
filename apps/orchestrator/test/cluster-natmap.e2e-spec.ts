import Redis from 'ioredis';
import request from 'supertest';
import { bootstrapAgent } from '@loom/agent-kit';
import { FreezableTcpProxy, PrivateRedisCluster } from '@loom/testing';
import { AGENT as LABOR_LAW } from '../../labor-law-agent/src/agent';
import { AGENT as LEGAL_RESEARCH } from '../../legal-research-agent/src/agent';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/** Every other client a master holds: its connection name and the port it connects from. */
async function clientsOf(port: number): Promise<Array<{ name: string; port: number }>> {
  const probe = new Redis(port, '127.0.0.1');
  try {
    const self = await probe.client('ID');
    const list = (await probe.client('LIST')) as string;
    return list
      .trim()
      .split('\n')
      .map((line) => Object.fromEntries(line.split(' ').map((field) => field.split('='))))
      .filter((client) => Number(client.id) !== self)
      .map((client) => ({ name: client.name, port: Number(client.addr.split(':').pop()) }));
  } finally {
    probe.disconnect();
  }
}

/**
 * REDIS_CLUSTER_NAT_MAP from the environment to every connection: an orchestrator and two agents
 * in-process, on a cluster whose masters are reached only through proxies on other ports (the
 * seeds and the map's targets), play one turn. The masters then hold no connection that did not
 * come through a proxy: the session store, the registry, the rate limiter and the transport's
 * both sides all took the map.
 */
describe('a turn on a Redis Cluster behind NAT (REDIS_CLUSTER_NAT_MAP)', () => {
  let cluster: PrivateRedisCluster;
  let proxies: FreezableTcpProxy[];
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
    proxies = await Promise.all(
      cluster.ports.map((port) => FreezableTcpProxy.start({ host: '127.0.0.1', port })),
    );
    const reachable = (i: number) => `127.0.0.1:${proxies[i].port}`;
    orch = await startInProcessOrchestrator('natmap', {
      env: {
        REDIS_URL: `redis://${reachable(0)}`,
        REDIS_CLUSTER_NODES: proxies.map((_, i) => reachable(i)).join(','),
        REDIS_CLUSTER_NAT_MAP: cluster.ports
          .map((port, i) => `127.0.0.1:${port}=${reachable(i)}`)
          .join(','),
      },
      agents: async (env) => [
        await bootstrapAgent(LEGAL_RESEARCH, env),
        await bootstrapAgent(LABOR_LAW, env),
      ],
    });
  });
  afterAll(async () => {
    await orch?.close();
    await Promise.all((proxies ?? []).map((proxy) => proxy.close()));
    await cluster?.stop(); // the keys go with it
  });

  it('answers the turn, is ready, and reaches every master through its proxy only', async () => {
    const server = orch.app.getHttpServer();
    const auth = orch.auth('natmap-user', 'natmap-tenant');
    const conv = await request(server).post('/v1/conversations').set('authorization', auth);
    expect(conv.status).toBe(201);
    const turn = await request(server)
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', auth)
      .send({ content: '公司辞退我不给经济补偿' });
    expect(turn.status).toBe(201);
    expect(turn.body.reply.agentType).toBe('labor-law');
    // The readiness probe asks every master CLUSTER SLOTS announces, where the map sends it.
    const health = await request(server).get('/health');
    expect([health.status, health.body.status]).toEqual([200, 'ok']);

    const proxied = new Set(proxies.flatMap((proxy) => [...proxy.upstreamPorts]));
    const clients = (await Promise.all(cluster.ports.map(clientsOf))).flat();
    expect(clients.filter((client) => !proxied.has(client.port))).toEqual([]);
    const names = new Set(clients.map((client) => client.name));
    for (const name of ['loom-session', 'loom-registry', 'loom-throttle'])
      expect(names).toContain(name);
    const kinds = ['loom-rpc-client-cmd-', 'loom-rpc-cmd-', 'loom-rpc-reader-'];
    for (const kind of kinds) expect([...names].some((n) => n.startsWith(kind))).toBe(true);
    for (const proxy of proxies) expect(proxy.accepted).toBeGreaterThan(0);
  });
});
