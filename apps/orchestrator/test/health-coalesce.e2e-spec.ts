import request from 'supertest';
import { createConnection } from 'mysql2/promise';
import { FreezableTcpProxy, TEST_MYSQL_URL, TEST_REDIS_URL, uniqueName } from '@loom/testing';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * /health is unauthenticated and not rate-limited (a load balancer must never be locked out):
 * each poll ran its own MySQL query and Redis PING, so a flood of polls was a flood of round
 * trips to the datastores. Polls that come while a check runs, or within a second of its result,
 * share that result: N at once cost the stores one check.
 */
describe('orchestrator: /health polls share one check', () => {
  let mysqlProxy: FreezableTcpProxy;
  let redisProxy: FreezableTcpProxy;
  let orch: InProcessOrchestrator;
  const database = uniqueName('loom_health_coalesce');
  const through = (proxy: FreezableTcpProxy, server: string, pathname = '') => {
    const url = new URL(server);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    if (pathname) url.pathname = pathname;
    return url.toString();
  };

  beforeAll(async () => {
    const mysql = new URL(TEST_MYSQL_URL);
    const redis = new URL(TEST_REDIS_URL);
    mysqlProxy = await FreezableTcpProxy.start({
      host: mysql.hostname,
      port: Number(mysql.port || 3306),
    });
    redisProxy = await FreezableTcpProxy.start({
      host: redis.hostname,
      port: Number(redis.port || 6379),
    });
    orch = await startInProcessOrchestrator('healthcoalesce', {
      env: {
        MYSQL_URL: through(mysqlProxy, TEST_MYSQL_URL, `/${database}`),
        REDIS_URL: through(redisProxy, TEST_REDIS_URL),
      },
    });
  });
  afterAll(async () => {
    await orch?.close();
    await mysqlProxy?.close();
    await redisProxy?.close();
    const admin = await createConnection(TEST_MYSQL_URL);
    await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await admin.end();
  });

  it('runs one MySQL probe and one Redis PING for 50 polls at once and right after', async () => {
    const server = orch.app.getHttpServer();
    // Past any result an earlier poll (the start's) left.
    await new Promise((r) => setTimeout(r, 1100));
    const probes = mysqlProxy.countSent('AS migrated');
    const pings = redisProxy.countSent('\r\nping\r\n');

    const statuses = await Promise.all(
      Array.from({ length: 50 }, async () => (await request(server).get('/health')).status),
    );
    for (let i = 0; i < 5; i++) statuses.push((await request(server).get('/health')).status);

    expect(statuses.every((s) => s === 200)).toBe(true);
    expect([probes(), pings()]).toEqual([1, 1]);
  });

  it('checks again once its result is a second old', async () => {
    const server = orch.app.getHttpServer();
    expect((await request(server).get('/health')).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1100));
    const probes = mysqlProxy.countSent('AS migrated');
    expect((await request(server).get('/health')).status).toBe(200);
    expect(probes()).toBe(1);
  });
});
