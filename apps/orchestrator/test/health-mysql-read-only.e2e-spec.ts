import request from 'supertest';
import { Connection, createConnection } from 'mysql2/promise';
import { PrivateMariaDb } from '@loom/testing';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * A MySQL that answers but refuses writes (read_only=ON: a replica after a failover, or a
 * primary set read-only for maintenance): every turn fails with 503, so the readiness probe
 * must say not ready, naming MySQL, for the load balancer to stop sending turns here.
 * SET GLOBAL on a server of the suite's own only.
 */
describe('orchestrator: /health while MySQL is read-only', () => {
  let server: PrivateMariaDb;
  let admin: Connection;
  let orch: InProcessOrchestrator;

  beforeAll(async () => {
    server = await PrivateMariaDb.start();
    admin = await createConnection(server.url);
    // An application user, as in production: read_only binds it (root may write anyway).
    await admin.query('CREATE DATABASE loom');
    await admin.query("CREATE USER 'loom'@'127.0.0.1' IDENTIFIED BY 'loom'");
    await admin.query("GRANT ALL ON loom.* TO 'loom'@'127.0.0.1'");
    orch = await startInProcessOrchestrator('healthreadonly', {
      env: { MYSQL_URL: `mysql://loom:loom@127.0.0.1:${server.port}/loom`, DB_POOL_SIZE: '2' },
    });
  });
  afterAll(async () => {
    await orch?.close();
    await admin?.end();
    await server?.destroy();
  });

  it('answers 503 naming MySQL while it refuses writes, 200 again once it takes them', async () => {
    const http = orch.app.getHttpServer();
    const auth = orch.auth('alice', 'tenant-ro');
    expect((await request(http).get('/health')).status).toBe(200);

    await admin.query('SET GLOBAL read_only = ON');
    expect((await request(http).post('/v1/conversations').set('authorization', auth)).status).toBe(
      503,
    );
    // A poll within HEALTH_RESULT_TTL_MS of the last check shares its result: 200 until it runs out.
    let health = await request(http).get('/health');
    for (let i = 0; i < 30 && health.status === 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      health = await request(http).get('/health');
    }
    expect(health.status).toBe(503);
    expect(health.body).toMatchObject({
      code: 'UNAVAILABLE',
      error: { mysql: { status: 'down', reason: expect.stringContaining('read-only') } },
    });
    expect(health.body.error.redis).toBeUndefined();

    await admin.query('SET GLOBAL read_only = OFF');
    let status = 503;
    for (let i = 0; i < 30 && status !== 200; i++) {
      if (i) await new Promise((r) => setTimeout(r, 100));
      status = (await request(http).get('/health')).status;
    }
    expect(status).toBe(200);
    expect((await request(http).post('/v1/conversations').set('authorization', auth)).status).toBe(
      201,
    );
  });
});
