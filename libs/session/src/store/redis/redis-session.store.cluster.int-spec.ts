import Redis, { Cluster } from 'ioredis';
import { createTestDatabase, PrivateRedisCluster, sleep } from '@loom/testing';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { newId } from '../../ids';
import { RedisClient } from '../../redis/redis-client';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { runSessionStoreContract } from '../session-store.contract';
import { TieredSessionStore } from '../tiered/tiered-session.store';
import { RedisSessionStore } from './redis-session.store';

/**
 * The session store contract on a real Redis Cluster of this file's own (three masters): the
 * Redis store as the standalone backend, and the tiered store as the apps run it. Every key of a
 * session carries its hash tag, so each script runs in one slot; sessions spread over masters.
 */
let cluster: PrivateRedisCluster;
let prefixNo = 0;
const prefix = () => `loomcluster${++prefixNo}:`;

beforeAll(async () => {
  cluster = await PrivateRedisCluster.start();
});
afterAll(() => cluster.stop()); // its keys go with it

runSessionStoreContract('redis (cluster)', async () => {
  const store = new RedisSessionStore(await cluster.client(), prefix());
  return { store, cleanup: () => store.close() };
});

runSessionStoreContract('tiered (LRU → Redis Cluster → MySQL)', async () => {
  const db = await createTestDatabase();
  const durable = new MysqlSessionStore(await openSessionDataSource({ url: db.url }));
  const hot = new RedisSessionStore(await cluster.client(), prefix(), { authoritative: false });
  const store = new TieredSessionStore(durable, hot, {
    ttlFor: ttlRules(DEFAULT_TTL),
    lruTtlMs: 0,
  });
  return {
    store,
    cleanup: async () => {
      await store.close();
      await db.drop();
    },
  };
});

describe('redis (cluster): the whole-cache purge', () => {
  let redis: RedisClient;
  beforeAll(async () => (redis = await cluster.client()));
  afterAll(() => redis.disconnect());

  it('drops the cached sessions of every master, not only those of the node SCAN reached', async () => {
    const keyPrefix = prefix();
    const hot = new RedisSessionStore(redis, keyPrefix, {
      authoritative: false,
      ownsConnection: false,
    });
    const scope = { tenantId: 'purge-tenant' };
    const sids = Array.from({ length: 30 }, () => newId('c'));
    for (const sid of sids) await hot.save(scope, sid, 'state', { sid });
    const holding = async () =>
      [...(await cluster.keysByMaster(keyPrefix)).values()].filter((keys) => keys.length > 0);
    expect((await holding()).length).toBe(3); // 30 sessions: on every master

    let cursor = '0';
    let steps = 0;
    do {
      cursor = await hot.purgeStep(cursor, 5);
      steps++;
    } while (cursor !== '0');

    expect(steps).toBeGreaterThanOrEqual(3);
    expect(await holding()).toEqual([]);
    for (const sid of sids) expect(await hot.get(scope, sid, 'state')).toBeNull();
  });

  it("drops those of a master whose connection the client had lost, not only the pooled masters'", async () => {
    const keyPrefix = prefix();
    const own = await cluster.client();
    const hot = new RedisSessionStore(own, keyPrefix, { authoritative: false });
    try {
      const scope = { tenantId: 'purge-tenant' };
      const sids = Array.from({ length: 30 }, () => newId('c'));
      for (const sid of sids) await hot.save(scope, sid, 'state', { sid });
      const holding = async () =>
        [...(await cluster.keysByMaster(keyPrefix)).values()].filter((keys) => keys.length > 0);
      expect((await holding()).length).toBe(3);

      // The connection to one master drops (its idle timeout, a proxy's reset, a restart that
      // kept its data): the master keeps what it caches, and the client's pool loses it until
      // a command of its slots brings it back.
      const admin = new Redis(cluster.ports[1], '127.0.0.1');
      try {
        await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      } finally {
        admin.disconnect();
      }
      for (let i = 0; i < 50 && (own as Cluster).nodes('master').length === 3; i++) await sleep(50);

      let cursor = '0';
      do cursor = await hot.purgeStep(cursor, 5);
      while (cursor !== '0');

      expect(await holding()).toEqual([]);
    } finally {
      await hot.close();
    }
  });
});
