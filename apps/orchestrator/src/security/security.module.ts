import { DynamicModule, Injectable, Logger, Module, OnApplicationShutdown } from '@nestjs/common';
import { ThrottlerModule } from '@nestjs/throttler';
import { openRedis, RedisClient } from '@loom/session';
import { LoomEnv, redisTarget } from '@loom/agent-kit';
import { RedisThrottlerStorage } from '@loom/security';
import { RequestLogMiddleware } from './request-log.middleware';
import { TenantThrottlerGuard } from './tenant-throttler.guard';

/** The rate limiter's own Redis connection (distributed profile only). */
@Injectable()
export class ThrottleRedis implements OnApplicationShutdown {
  readonly redis: RedisClient | null;
  private readonly log = new Logger('RateLimit');
  private lastError = 0;

  constructor(env: LoomEnv) {
    this.redis =
      env.LOOM_PROFILE === 'embedded'
        ? null
        : openRedis(redisTarget(env), {
            connectionName: 'loom-throttle',
            enableOfflineQueue: false,
            maxRetriesPerRequest: 1,
            commandTimeout: 500,
            socketTimeout: 500, // a dead socket is dropped and opened again
            retryStrategy: (times) => Math.min(times * 100, 2000),
          });
    this.redis?.on('error', () => undefined);
  }

  /** Redis errors let requests through; say so at most once a minute. */
  report = (err: unknown): void => {
    if (Date.now() - this.lastError < 60_000) return;
    this.lastError = Date.now();
    this.log.warn(
      `rate limiting is off while Redis fails: ${err instanceof Error ? err.message : String(err)}`,
    );
  };

  onApplicationShutdown(): void {
    this.redis?.disconnect();
  }
}

/**
 * Input hardening of the HTTP API that Nest wires: the per-tenant rate limit (@nestjs/throttler
 * on Redis, LOOM_RATE_LIMIT_PER_MINUTE per LOOM_RATE_LIMIT_WINDOW_MS; 0 turns it off) and the
 * access log (mounted by bootstrap.ts, right after the request's CLS context). Body size and JSON depth limits are in bootstrap.ts (they run before Nest).
 */
@Module({})
export class SecurityModule {
  static forRoot(env: LoomEnv): DynamicModule {
    const redisModule = {
      module: class ThrottleRedisModule {},
      providers: [{ provide: ThrottleRedis, useFactory: () => new ThrottleRedis(env) }],
      exports: [ThrottleRedis],
    };
    return {
      module: SecurityModule,
      imports: [
        ThrottlerModule.forRootAsync({
          imports: [redisModule],
          inject: [ThrottleRedis],
          useFactory: (t: ThrottleRedis) => ({
            throttlers: [
              {
                name: 'default',
                limit: env.LOOM_RATE_LIMIT_PER_MINUTE,
                ttl: env.LOOM_RATE_LIMIT_WINDOW_MS,
              },
            ],
            skipIf: () => env.LOOM_RATE_LIMIT_PER_MINUTE === 0,
            storage: t.redis
              ? new RedisThrottlerStorage(t.redis, env.LOOM_KEY_PREFIX, t.report)
              : undefined,
          }),
        }),
      ],
      providers: [TenantThrottlerGuard, RequestLogMiddleware],
      exports: [TenantThrottlerGuard, RequestLogMiddleware],
    };
  }
}
