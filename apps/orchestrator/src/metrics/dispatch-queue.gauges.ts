import { Inject, Injectable, OnModuleInit } from '@nestjs/common';
import { Gauge } from 'prom-client';
import {
  AGENT_REGISTRY,
  agentExecutePattern,
  AgentRegistry,
  LOOM_ENV,
  LoomEnv,
  requestQueueDepth,
  RequestQueueDepth,
} from '@loom/agent-kit';
import { SESSION_INFRA, SessionInfra } from '@loom/session';
import { AgentCatalog } from '../turn/agent-catalog';
import { MetricsService } from './metrics.service';
import { ScrapeCollector } from './scraper';

/** Agent types read per scrape at most (the catalog holds those seen in the last week). */
const MAX_TYPES_READ = 200;

interface AgentTypeReading {
  instances: number;
  depth?: RequestQueueDepth;
}

/**
 * Per agent type, live or known to the planner (the catalog), read when Prometheus scrapes:
 * its live instances (the registry GET /v1/agents reads), and its request stream's depth in
 * Redis. The embedded profile has no Redis: the queue gauges are absent there. A type whose
 * depth could not be read is left out of those gauges for that scrape.
 */
@Injectable()
export class DispatchQueueGauges implements ScrapeCollector, OnModuleInit {
  private readonly gauges: Gauge[];
  private readonly instances: Gauge;
  private readonly pending: Gauge;
  private readonly lag: Gauge;
  private readonly dead: Gauge;

  constructor(
    private readonly metrics: MetricsService,
    private readonly catalog: AgentCatalog,
    @Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry,
    @Inject(SESSION_INFRA) private readonly infra: SessionInfra,
    @Inject(LOOM_ENV) private readonly env: LoomEnv,
  ) {
    const gauge = (name: string, help: string) =>
      new Gauge({ name, help, labelNames: ['agent_type'], registers: [metrics.registry] });
    this.instances = gauge('loom_agent_instances', 'Live instances per agent type');
    this.pending = gauge(
      'loom_dispatch_queue_pending',
      'Requests delivered to an agent instance and not acknowledged yet',
    );
    this.lag = gauge('loom_dispatch_queue_lag', 'Requests not delivered to any agent instance yet');
    this.dead = gauge('loom_dead_letters', 'Requests on the dead-letter stream');
    this.gauges = [this.instances, this.pending, this.lag, this.dead];
  }

  onModuleInit(): void {
    this.metrics.addCollector(this);
  }

  clear(): void {
    for (const g of this.gauges) g.reset();
  }

  async read(failed: (err: unknown) => void): Promise<() => void> {
    const [live, known] = await Promise.all([
      this.registry.live(),
      this.catalog.agents().then(
        ({ agents }) => agents.map((a) => a.agentType),
        (err) => (failed(err), []),
      ),
    ]);
    const readings = new Map<string, AgentTypeReading>(known.map((t) => [t, { instances: 0 }]));
    for (const a of live) readings.set(a.descriptor.agentType, { instances: a.instances });
    const redis = this.infra.redis;
    if (redis) {
      const types = [...readings.keys()].sort().slice(0, MAX_TYPES_READ);
      await Promise.all(
        types.map(async (type) => {
          const pattern = agentExecutePattern(type);
          await requestQueueDepth(redis, this.env.LOOM_KEY_PREFIX, pattern).then(
            (depth) => (readings.get(type)!.depth = depth),
            failed,
          );
        }),
      );
    }
    return () => this.apply(readings);
  }

  /**
   * Folded agent types (past the label cap) add up under `other`. Starts from zero: scrapes that
   * overlap (an HA pair of Prometheus servers) each apply their reading, and would add up.
   */
  private apply(readings: Map<string, AgentTypeReading>): void {
    this.clear();
    for (const [type, { instances, depth }] of readings) {
      const labels = { agent_type: this.metrics.agentTypeLabel(type) };
      this.instances.inc(labels, instances);
      if (!depth) continue;
      this.pending.inc(labels, depth.pending);
      if (depth.lag !== null) this.lag.inc(labels, depth.lag);
      this.dead.inc(labels, depth.deadLetters);
    }
  }
}
