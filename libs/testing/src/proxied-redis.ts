import { PrivateRedisServer } from './private-redis';
import { FreezableTcpProxy } from './tcp-proxy';

/**
 * A private redis-server with a FreezableTcpProxy in front of it: connections opened through
 * `proxiedUrl` are the ones a test resets or freezes, those on `redis.url` go straight through.
 */
export interface ProxiedRedis {
  redis: PrivateRedisServer;
  proxy: FreezableTcpProxy;
  proxiedUrl: string;
  /**
   * Waits for what the test opened on them to close (5 s at most: a close can hang on a
   * connection the test cut off), then stops the proxy and the server.
   */
  stop(...closing: Array<Promise<unknown> | undefined>): Promise<void>;
}

export async function startProxiedRedis(): Promise<ProxiedRedis> {
  const redis = await PrivateRedisServer.start();
  const proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: redis.port });
  return {
    redis,
    proxy,
    proxiedUrl: `redis://127.0.0.1:${proxy.port}`,
    stop: async (...closing) => {
      let timer: NodeJS.Timeout | undefined;
      const giveUp = new Promise((resolve) => (timer = setTimeout(resolve, 5_000)));
      // The timer is cleared however the race ends: left running, it held the test worker open.
      await Promise.race([Promise.allSettled(closing), giveUp]).finally(() => clearTimeout(timer));
      await proxy.close();
      await redis.kill();
    },
  };
}
