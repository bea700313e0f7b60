import { Controller, Get, Inject, Res, ServiceUnavailableException } from '@nestjs/common';
import { Response } from 'express';
import { ApiServiceUnavailableResponse, ApiTags } from '@nestjs/swagger';
import { HealthCheck, HealthCheckService, HealthIndicatorService } from '@nestjs/terminus';
import {
  pingRedis,
  queryWithin,
  SESSION_INFRA,
  SessionInfra,
  SYSTEM_TENANT,
  SystemSessions,
} from '@loom/session';
import { ApiErrors } from '../openapi/api-errors.decorator';

/** How long a store may take to answer the probe before it counts as down (ms). */
const PROBE_TIMEOUT_MS = 1000;

/**
 * 200 when the stores answer, else 503: MySQL and Redis (distributed), or the JSON-file store
 * (embedded, which uses neither and does not claim them).
 */
@ApiTags('health')
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly indicator: HealthIndicatorService,
    @Inject(SESSION_INFRA) private readonly infra: SessionInfra,
  ) {}

  @Get()
  @ApiErrors(400)
  @ApiServiceUnavailableResponse({
    description: "A store does not answer: API.md's error body, with terminus's report of which",
    schema: {
      type: 'object',
      required: ['statusCode', 'code', 'message', 'status', 'details'],
      properties: {
        statusCode: { type: 'number', example: 503 },
        code: { type: 'string', example: 'UNAVAILABLE' },
        message: { type: 'string', example: 'a backing store does not answer' },
        status: { type: 'string', example: 'error' },
        info: { type: 'object', additionalProperties: true, nullable: true },
        error: { type: 'object', additionalProperties: true, nullable: true },
        details: { type: 'object', additionalProperties: true },
      },
    },
  })
  @HealthCheck()
  async check(@Res({ passthrough: true }) res: Response) {
    try {
      return await this.health.check(this.indicators());
    } catch (err) {
      if (!(err instanceof ServiceUnavailableException)) throw err;
      // API.md's error shape, with terminus's report of what is down.
      res.status(503);
      return {
        statusCode: 503,
        code: 'UNAVAILABLE',
        message: 'a backing store does not answer',
        ...(err.getResponse() as object),
      };
    }
  }

  private indicators() {
    if (!this.infra.dataSource)
      return [
        () =>
          this.probe(this.infra.store.kind, () =>
            this.infra.store.exists({ tenantId: SYSTEM_TENANT }, SystemSessions.catalog),
          ),
      ];
    return [
      // The session table, not just the server: an unmigrated database is not ready.
      () =>
        this.probe('mysql', () =>
          // Bounded by the probe's own time-out, after which its connection is closed: one
          // left waiting on a server that stopped answering would hold its place in the pool.
          this.infra.dataSource
            ? queryWithin(
                this.infra.dataSource,
                'SELECT 1 FROM loom_session_state LIMIT 1',
                [],
                PROBE_TIMEOUT_MS,
              )
            : undefined,
        ),
      () => this.probe('redis', () => (this.infra.redis ? pingRedis(this.infra.redis) : undefined)),
    ];
  }

  private async probe(name: string, fn: () => Promise<unknown> | undefined) {
    const indicator = this.indicator.check(name);
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        fn(),
        new Promise(
          (_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), PROBE_TIMEOUT_MS)),
        ),
      ]);
      return indicator.up({ ms: Date.now() - started });
    } catch {
      return indicator.down();
    } finally {
      clearTimeout(timer);
    }
  }
}
