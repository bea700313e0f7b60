/**
 * Fixtures of the tiered store's acceptance suite: a private redis-server that the suite may
 * pause, kill and flush (never the shared one), tiered stores wired like production
 * (createRedis, own MySQL pool each), and a stopwatch.
 */
import { once } from 'events';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { createRedis } from '../../session.providers';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { RedisSessionStore } from '../redis/redis-session.store';
import { HotTierGuardOptions } from './hot-tier-guard';
import { TieredSessionStore } from './tiered-session.store';
import { RedisClient } from '../../redis/redis-client';

export { PrivateRedisServer, sleep } from '@loom/testing';

/** Runs `fn` and returns its result with how long it took (ms). */
export async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - started };
}

/** A tiered store as the apps build it: its own MySQL pool and its own ioredis connection. */
export async function openTieredStore(
  mysqlUrl: string,
  redisUrl: string,
  prefix: string,
  name: string,
  guard?: HotTierGuardOptions,
): Promise<TieredSessionStore> {
  const redis = await readyRedis(redisUrl, name);
  return new TieredSessionStore(
    new MysqlSessionStore(await openSessionDataSource({ url: mysqlUrl })),
    new RedisSessionStore(redis, prefix, { authoritative: false }),
    { ttlFor: ttlRules(DEFAULT_TTL), guard },
  );
}

/**
 * createRedis's connection, once connected: it has no offline queue, so a call made before it
 * is ready fails (and would count as a Redis failure, or make a lock go without Redis).
 */
export async function readyRedis(url: string, name: string): Promise<RedisClient> {
  const redis = createRedis(url, name);
  redis.on('error', () => undefined); // the breaker reports Redis failures; keep the log quiet
  if (redis.status !== 'ready') await once(redis, 'ready');
  return redis;
}

/** Every key under `prefix` (SCAN, as a test may; the library never does). */
export async function keysUnder(redis: RedisClient, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    out.push(...keys);
  } while (cursor !== '0');
  return out;
}
