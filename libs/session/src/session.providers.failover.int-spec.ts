import Redis from 'ioredis';
import {
  createTestDatabase,
  createTestPrefix,
  FreezableTcpProxy,
  PrivateRedisServer,
} from '@loom/testing';
import { createSessionInfra } from './session.providers';

async function eventually(what: string, ok: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A failover that demotes the primary (Sentinel, a managed Redis) moves the name the apps use to
 * the new primary, but connections already open stay on the old one, now a replica that answers
 * every write READONLY. The session library's connection carries the hot tier, locks and
 * execution claims: it must connect again, as the transport's connections do.
 */
describe('createSessionInfra after a Redis failover (private redis-servers)', () => {
  it('connects again when its connection was left on the demoted primary (READONLY)', async () => {
    const db = await createTestDatabase('loom_failover');
    const prefix = createTestPrefix('loomfailover');
    const [primary, replica] = await Promise.all([
      PrivateRedisServer.start(),
      PrivateRedisServer.start(),
    ]);
    const proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: primary.port });
    const admin = [new Redis(primary.url), new Redis(replica.url)];
    let infra: Awaited<ReturnType<typeof createSessionInfra>> | undefined;
    try {
      for (const r of admin) {
        // Replication without files: none is left in the working directory.
        await r.config('SET', 'repl-diskless-sync', 'yes', 'repl-diskless-sync-delay', '0');
        await r.config('SET', 'repl-diskless-load', 'swapdb');
      }
      await admin[1].replicaof('127.0.0.1', primary.port);
      infra = await createSessionInfra({
        mysqlUrl: db.url,
        keyPrefix: prefix.prefix,
        redisUrl: `redis://127.0.0.1:${proxy.port}`,
      });
      const redis = infra.redis!;
      const key = `${prefix.prefix}failover-probe`;
      await redis.set(key, 'before');
      await eventually('the replica in sync', async () =>
        (await admin[1].info('replication')).includes('master_link_status:up'),
      );

      // The failover: the replica is promoted and the name now leads to it; the old primary
      // becomes its replica, and keeps the connection the library had.
      await admin[1].replicaof('NO', 'ONE');
      proxy.retarget({ host: '127.0.0.1', port: replica.port });
      await admin[0].replicaof('127.0.0.1', replica.port);

      // A write may be refused once (READONLY: nothing ran); then they reach the new primary.
      // Before, every write was refused until the process restarted.
      await eventually('a write on the new primary', () =>
        redis.set(key, 'after').then(
          () => true,
          () => false,
        ),
      );
      expect(await admin[1].get(key)).toBe('after');
    } finally {
      await infra?.close();
      admin.forEach((r) => r.disconnect());
      await proxy.close();
      await Promise.all([primary.kill(), replica.kill(), db.drop(), prefix.cleanup()]);
    }
  });
});

/**
 * A Redis host gone without a reset (cable pulled, VM frozen, failed over to another host at
 * its address): the session connection's commands time out after 2 s, but the socket stayed
 * open until the kernel's retransmission time-out (~15 min), so every turn failed 503 for that
 * long even once the address led to a live Redis again.
 */
describe('createSessionInfra after its Redis host vanished without a reset (private redis-server)', () => {
  it('drops the dead connection and serves again on a new one', async () => {
    const db = await createTestDatabase('loom_stranded');
    const prefix = createTestPrefix('loomstranded');
    const server = await PrivateRedisServer.start();
    const proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: server.port });
    let infra: Awaited<ReturnType<typeof createSessionInfra>> | undefined;
    try {
      infra = await createSessionInfra({
        mysqlUrl: db.url,
        keyPrefix: prefix.prefix,
        redisUrl: `redis://127.0.0.1:${proxy.port}`,
      });
      const redis = infra.redis!;
      const key = `${prefix.prefix}stranded-probe`;
      await redis.set(key, 'before');

      proxy.strand(); // the open connection hears nothing more; new ones reach Redis
      await expect(redis.set(key, 'lost')).rejects.toThrow(/timed out|Socket timeout/);
      await eventually(
        'a write on a new connection',
        () =>
          redis.set(key, 'after').then(
            () => true,
            () => false,
          ),
        8000,
      );
    } finally {
      await infra?.close();
      await proxy.close();
      await Promise.all([server.kill(), db.drop(), prefix.cleanup()]);
    }
  }, 60_000);
});
