import request from 'supertest';
import { createConnection } from 'mysql2/promise';
import { FreezableTcpProxy, TEST_MYSQL_URL, uniqueName } from '@loom/testing';
import { HEALTH_RESULT_TTL_MS } from '../src/health/health.controller';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * A MySQL failover that leaves the old server's connections hanging (no reset) while new ones
 * reach the database: the readiness probe, polled all along, must not keep the pool's
 * connections stuck behind its unanswered statements, or the orchestrator answers 503 for good.
 */
describe('orchestrator: /health polled through a failover without a reset', () => {
  let proxy: FreezableTcpProxy;
  let orch: InProcessOrchestrator;
  const database = uniqueName('loom_health_failover');

  beforeAll(async () => {
    const server = new URL(TEST_MYSQL_URL);
    proxy = await FreezableTcpProxy.start({
      host: server.hostname,
      port: Number(server.port || 3306),
    });
    const url = new URL(server.toString());
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    url.pathname = `/${database}`;
    orch = await startInProcessOrchestrator('healthfailover', {
      env: { MYSQL_URL: url.toString(), DB_POOL_SIZE: '2', DB_QUERY_TIMEOUT_MS: '500' },
    });
  });
  afterAll(async () => {
    await orch?.close();
    await proxy?.close();
    const admin = await createConnection(TEST_MYSQL_URL);
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.end();
  });

  it('answers ready again, and takes turns, once new connections reach the database', async () => {
    const server = orch.app.getHttpServer();
    expect((await request(server).get('/health')).status).toBe(200);
    proxy.strand();
    // More probes than the pool has connections: those that take a stranded one go unanswered.
    // Each after the last one's result ran out (HEALTH_RESULT_TTL_MS): a check of its own.
    const afterLastResult = () => new Promise((r) => setTimeout(r, HEALTH_RESULT_TTL_MS + 50));
    for (let i = 0; i < 4; i++) {
      await afterLastResult();
      await request(server).get('/health');
    }

    const statuses: number[] = [];
    for (let i = 0; i < 15 && statuses[statuses.length - 1] !== 200; i++) {
      await afterLastResult();
      statuses.push((await request(server).get('/health')).status);
    }
    expect(statuses[statuses.length - 1]).toBe(200);
    const auth = orch.auth('alice', 'tenant-h');
    expect(
      (await request(server).post('/v1/conversations').set('authorization', auth)).status,
    ).toBe(201);
  });
});
