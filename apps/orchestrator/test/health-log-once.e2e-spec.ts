import { Logger } from '@nestjs/common';
import { Writable } from 'stream';
import request from 'supertest';
import { createConnection } from 'mysql2/promise';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { FreezableTcpProxy, TEST_MYSQL_URL, uniqueName } from '@loom/testing';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * A load balancer polls /health every few seconds: through an outage, each failing poll used to
 * write two error lines (terminus's "Health Check has failed!" and the access log's 503), an
 * error flood for an outage already reported. The readiness log says it once per change: the
 * first failure (an error naming what is down) and the recovery; the polls between are warnings
 * of the access log only.
 */
describe('orchestrator: /health failing polls log the outage once', () => {
  let proxy: FreezableTcpProxy;
  let orch: InProcessOrchestrator;
  let out = '';
  const database = uniqueName('loom_health_log');
  const lines = () =>
    out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);

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
    orch = await startInProcessOrchestrator('healthlog', {
      env: { MYSQL_URL: url.toString(), DB_POOL_SIZE: '2', DB_QUERY_TIMEOUT_MS: '500' },
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
    await orch?.close();
    await proxy?.close();
    const admin = await createConnection(TEST_MYSQL_URL);
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.end();
  });

  it('says the first failure and the recovery, not every failing poll', async () => {
    const server = orch.app.getHttpServer();
    expect((await request(server).get('/health')).status).toBe(200);
    proxy.freeze();
    // A poll within HEALTH_RESULT_TTL_MS of the last check shares its result: 200 until it runs out.
    let failing = 0;
    for (let i = 0; i < 50 && failing < 3; i++) {
      if ((await request(server).get('/health')).status === 503) failing++;
      else await new Promise((r) => setTimeout(r, 100));
    }
    expect(failing).toBe(3);
    proxy.thaw();
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; i++) {
      status = (await request(server).get('/health')).status;
      if (status === 503) failing++;
      if (status !== 200) await new Promise((r) => setTimeout(r, 200));
    }
    expect(status).toBe(200);
    // Written when the response ends: let the last access line land.
    await new Promise((r) => setTimeout(r, 100));

    const health = lines().filter(
      (l) =>
        l.context === 'HealthCheckService' ||
        l.context === 'Health' ||
        (l.context === 'HTTP' && l.path === '/health'),
    );
    const errors = health.filter((l) => l.level === 'error');
    expect(errors).toEqual([
      expect.objectContaining({ context: 'Health', msg: expect.stringContaining('not ready') }),
    ]);
    expect(JSON.stringify(errors[0])).toContain('mysql');
    expect(health).toContainEqual(
      expect.objectContaining({ context: 'Health', msg: expect.stringContaining('ready again') }),
    );
    // The failing polls (each one, shared result or not) are still in the access log, as warnings.
    expect(
      health.filter((l) => l.context === 'HTTP' && l.status === 503 && l.level === 'warn'),
    ).toHaveLength(failing);
  });
});
