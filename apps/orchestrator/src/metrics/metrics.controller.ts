import { Controller, Get, Header, UseGuards } from '@nestjs/common';
import { ApiOkResponse, ApiOperation, ApiTags } from '@nestjs/swagger';
import { Registry } from 'prom-client';
import { ApiErrors } from '../openapi/api-errors.decorator';
import { MetricsService } from './metrics.service';
import { MetricsTokenGuard } from './metrics-token.guard';

/** Prometheus scrapes the orchestrator here (docs/metrics.md); absent with LOOM_METRICS=false. */
@ApiTags('metrics')
@Controller('metrics')
@UseGuards(MetricsTokenGuard)
export class MetricsController {
  constructor(private readonly metrics: MetricsService) {}

  @Get()
  @ApiOperation({
    summary: 'Prometheus metrics',
    description:
      'Turns, agent calls, recoveries, model usage and the dispatch queues, in the Prometheus text ' +
      'format. Open unless LOOM_METRICS_TOKEN is set; then `Authorization: Bearer <that token>` ' +
      '(not an API token). Not served (404) with LOOM_METRICS=false.',
  })
  @ApiOkResponse({
    description: 'The metrics (text/plain; version=0.0.4)',
    content: { 'text/plain': { schema: { type: 'string' } } },
  })
  @ApiErrors(400, 401)
  @Header('Content-Type', Registry.PROMETHEUS_CONTENT_TYPE)
  @Header('Cache-Control', 'no-store')
  scrape(): Promise<string> {
    return this.metrics.scrape();
  }
}
