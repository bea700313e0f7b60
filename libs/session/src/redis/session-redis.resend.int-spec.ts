import Redis from 'ioredis';
import { FreezableTcpProxy, PrivateRedisServer, sleep } from '@loom/testing';
import { createRedis } from '../session.providers';

/**
 * The session connection's command that failed (its 2 s time-out: the caller was told, and may
 * have tried again or given up a lock) must not run later: ioredis sends the commands a dropped
 * connection left unanswered again once it reconnects, and a lock taken, a turn appended or a
 * counter bumped then happens behind the caller's back (or twice).
 */
describe('createRedis: a command that failed is not sent again (private redis-server)', () => {
  let server: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: server.port });
  });
  afterAll(async () => {
    await proxy.close();
    await server.kill();
  });

  it('after its host vanished without a reset, the address leading to a live Redis', async () => {
    const redis = createRedis(`redis://127.0.0.1:${proxy.port}`, 'loom-resend-test');
    redis.on('error', () => undefined);
    const admin = new Redis(server.url);
    try {
      if (redis.status !== 'ready') await new Promise((ok) => redis.once('ready', ok));
      await redis.set('counter', '0');
      proxy.strand();
      await expect(redis.incr('counter')).rejects.toThrow(/timed out|Socket timeout/);
      // Connected again: anything sent before on this connection has run by the time this answers.
      let value: string | null = null;
      for (let i = 0; i < 50 && value === null; i++) {
        value = await redis.get('counter').catch(() => null);
        if (value === null) await sleep(100);
      }
      expect(value).toBe('0');
      expect(await admin.get('counter')).toBe('0');
    } finally {
      admin.disconnect();
      redis.disconnect();
    }
  }, 30_000);
});
