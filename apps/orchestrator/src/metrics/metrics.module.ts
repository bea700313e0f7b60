import { DynamicModule, Module } from '@nestjs/common';
import { LoomEnv } from '@loom/agent-kit';
import { MetricsController } from './metrics.controller';
import { MetricsService } from './metrics.service';
import { METRICS_TOKEN, MetricsTokenGuard } from './metrics-token.guard';

/**
 * Prometheus metrics: MetricsService for the code that counts (turns, dispatch, recovery,
 * usage), and GET /metrics unless LOOM_METRICS=false (then the route does not exist: 404, and
 * the process metrics are not collected). The queue gauges (DispatchQueueGauges) need the
 * registry and catalog of the app module, which provides them and adds them at start.
 */
@Module({})
export class MetricsModule {
  static forRoot(env: LoomEnv): DynamicModule {
    return {
      module: MetricsModule,
      controllers: env.LOOM_METRICS ? [MetricsController] : [],
      providers: [
        {
          provide: MetricsService,
          useFactory: () => new MetricsService({ processMetrics: env.LOOM_METRICS }),
        },
        // Injected, not passed: Nest builds a @UseGuards guard from the module's providers.
        { provide: METRICS_TOKEN, useValue: env.LOOM_METRICS_TOKEN ?? null },
        MetricsTokenGuard,
      ],
      exports: [MetricsService],
    };
  }
}
