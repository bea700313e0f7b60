/**
 * Fixtures of the tiered store's acceptance suite: a private redis-server that the suite may
 * pause, kill and flush (never the shared one), tiered stores wired like production
 * (createRedis, own MySQL pool each), and a stopwatch.
 */
import { ChildProcess, spawn } from 'child_process';
import { once } from 'events';
import { createServer } from 'net';
import Redis from 'ioredis';
import { DEFAULT_TTL, ttlRules } from '../../config/session-options';
import { createRedis } from '../../session.providers';
import { openSessionDataSource } from '../mysql/data-source';
import { MysqlSessionStore } from '../mysql/mysql-session.store';
import { RedisSessionStore } from '../redis/redis-session.store';
import { HotTierGuardOptions } from './hot-tier-guard';
import { TieredSessionStore } from './tiered-session.store';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs `fn` and returns its result with how long it took (ms). */
export async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - started };
}

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

/** A redis-server child process on a free port, without persistence. */
export class PrivateRedisServer {
  private child: ChildProcess | null = null;

  private constructor(readonly port: number) {}

  static async start(): Promise<PrivateRedisServer> {
    const server = new PrivateRedisServer(await freePort());
    await server.restart();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the server (again, on the same port) and waits until it answers PING. */
  async restart(): Promise<void> {
    if (this.child) throw new Error('the private redis-server is already running');
    const child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    child.on('exit', () => {
      if (this.child === child) this.child = null;
    });
    this.child = child;
    const probe = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    probe.on('error', () => undefined);
    try {
      for (let waited = 0; ; waited += 50) {
        if (
          await probe.ping().then(
            () => true,
            () => false,
          )
        )
          return;
        if (waited > 5000 || child.exitCode !== null)
          throw new Error(`redis-server did not start on port ${this.port}`);
        await sleep(50);
      }
    } finally {
      probe.disconnect();
    }
  }

  /** SIGSTOP: the server keeps its connections open but answers nothing. */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** SIGKILL, and waits until the process is gone (the port is free again). */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }
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
export async function readyRedis(url: string, name: string): Promise<Redis> {
  const redis = createRedis(url, name);
  redis.on('error', () => undefined); // the breaker reports Redis failures; keep the log quiet
  if (redis.status !== 'ready') await once(redis, 'ready');
  return redis;
}

/** Every key under `prefix` (SCAN, as a test may; the library never does). */
export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    out.push(...keys);
  } while (cursor !== '0');
  return out;
}
