import { Controller, Get, Inject } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { HealthCheck, HealthCheckService, HealthIndicatorService } from '@nestjs/terminus';
import { SESSION_INFRA, SessionInfra } from '@loom/session';

/** 200 when Redis and MySQL answer (or the embedded file store is in use), else 503. */
@ApiTags('health')
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly indicator: HealthIndicatorService,
    @Inject(SESSION_INFRA) private readonly infra: SessionInfra,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([
      () => this.probe('mysql', () => this.infra.dataSource?.query('SELECT 1')),
      () => this.probe('redis', () => this.infra.redis?.ping()),
    ]);
  }

  private async probe(name: string, fn: () => Promise<unknown> | undefined) {
    const indicator = this.indicator.check(name);
    const started = Date.now();
    try {
      await Promise.race([
        fn(),
        new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 1000)),
      ]);
      return indicator.up({ ms: Date.now() - started });
    } catch {
      return indicator.down();
    }
  }
}
