import { Injectable } from '@nestjs/common';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { Usage } from '@loom/session';
import {
  agentCallOutcome,
  DURATION_BUCKETS,
  LabelFolder,
  RecoveryOutcome,
  turnOutcome,
} from './metric-labels';
import { ScrapeCollector, Scraper } from './scraper';

/** Which bound an HTTP connection was refused by: all connections, or its address's share. */
export type ConnectionBound = 'total' | 'address';

/** A turn being measured: it ends once, as completed, replayed or failed. */
export interface TurnMeasure {
  /** Answered from a stored turn (its Idempotency-Key): nothing ran. */
  replayed(): void;
  completed(): void;
  failed(err: unknown): void;
}

/** An agent call being measured. */
export interface AgentCallMeasure {
  /** `replayed`: the agent returned the stored result of an earlier delivery. */
  completed(replayed: boolean): void;
  failed(err: unknown): void;
}

export interface MetricsOptions {
  /** prom-client's process metrics (CPU, memory, event loop, GC), prefixed `loom_`. */
  processMetrics?: boolean;
  /** How long a scrape waits for what it reads from Redis before it leaves those gauges out. */
  collectBudgetMs?: number;
}

/**
 * The orchestrator's Prometheus metrics, in a registry of its own (several apps may share a
 * process: tests, the embedded profile). Turns, agent calls, recoveries and model usage are
 * counted where they happen, in memory only; gauges read at scrape time come from collectors.
 * No label carries a tenant, user, conversation or task id.
 */
@Injectable()
export class MetricsService {
  readonly registry = new Registry();
  private readonly agentTypes = new LabelFolder();
  private readonly scraper: Scraper;
  private readonly turns = this.counter('loom_turns_total', 'Turns by how they ended', ['outcome']);
  private readonly turnSeconds = new Histogram({
    name: 'loom_turn_duration_seconds',
    help: 'Duration of completed turns (replays and failures left out)',
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });
  private readonly calls = this.counter(
    'loom_agent_calls_total',
    'Agent executions dispatched by this orchestrator, by agent type and how they ended',
    ['agent_type', 'outcome'],
  );
  private readonly callSeconds = new Histogram({
    name: 'loom_agent_call_duration_seconds',
    help: 'Duration of agent calls that completed (stored results left out)',
    labelNames: ['agent_type'],
    buckets: DURATION_BUCKETS,
    registers: [this.registry],
  });
  private readonly recoveries = this.counter(
    'loom_tasks_recovered_total',
    'Interrupted tasks taken up again, by how they ended',
    ['outcome'],
  );
  private readonly tokens = this.counter(
    'loom_llm_tokens_total',
    "Model tokens added to conversations' usage (planner, agents, titles, summaries)",
    ['kind'],
  );
  private readonly cost = this.counter(
    'loom_llm_cost_usd_total',
    "Model cost in USD added to conversations' usage",
  );

  private readonly refusedConnections = this.counter(
    'loom_http_connections_refused_total',
    'HTTP connections closed unanswered as they arrived, by the bound they were past',
    ['limit'],
  );

  private readonly inFlight = new Gauge({
    name: 'loom_turns_in_flight',
    help: 'Turns this orchestrator holds now (at most LOOM_MAX_TURNS_IN_FLIGHT)',
    registers: [this.registry],
  });

  constructor(options: MetricsOptions = {}) {
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'loom_' });
    const errors = this.counter(
      'loom_metrics_collect_errors_total',
      'Scrape-time reads (Redis, the agent registry) that failed or ran out of time',
    );
    this.scraper = new Scraper(errors, options.collectBudgetMs);
    for (const kind of ['prompt', 'completion']) this.tokens.inc({ kind }, 0);
    for (const limit of ['total', 'address']) this.refusedConnections.inc({ limit }, 0);
  }

  /** Starts measuring a turn. */
  turn(): TurnMeasure {
    const end = this.turnSeconds.startTimer();
    let replayed = false;
    const count = (outcome: string) => this.turns.inc({ outcome });
    return {
      replayed: () => void (replayed = true),
      completed: () => (replayed ? count('replayed') : (end(), count('completed'))),
      failed: (err) => count(replayed ? 'replayed' : turnOutcome(err)),
    };
  }

  /** The turns this orchestrator holds now (TurnAdmission). */
  turnsInFlight(count: number): void {
    this.inFlight.set(count);
  }

  /**
   * A connection the HTTP server closed as it arrived: past HTTP_MAX_CONNECTIONS (`total`) or
   * its address's HTTP_MAX_CONNECTIONS_PER_ADDRESS (`address`).
   */
  connectionRefused(limit: ConnectionBound): void {
    this.refusedConnections.inc({ limit });
  }

  /** Starts measuring one call of an agent type. */
  agentCall(agentType: string): AgentCallMeasure {
    const agent_type = this.agentTypeLabel(agentType);
    const end = this.callSeconds.startTimer({ agent_type });
    return {
      completed: (replayed) => {
        if (!replayed) end();
        this.calls.inc({ agent_type, outcome: replayed ? 'replayed' : 'completed' });
      },
      failed: (err) => this.calls.inc({ agent_type, outcome: agentCallOutcome(err) }),
    };
  }

  recovered(outcome: RecoveryOutcome): void {
    this.recoveries.inc({ outcome });
  }

  /** Model usage just added to a conversation's (stored) usage. */
  spent(usage: Usage): void {
    const amount = (n: number) => (Number.isFinite(n) && n > 0 ? n : 0);
    this.tokens.inc({ kind: 'prompt' }, amount(usage.promptTokens));
    this.tokens.inc({ kind: 'completion' }, amount(usage.completionTokens));
    this.cost.inc(amount(usage.costUsd));
  }

  /** The label value of an agent type (the first 50 by name, later ones `other`). */
  agentTypeLabel(agentType: string): string {
    return this.agentTypes.label(agentType);
  }

  /** Adds gauges read at scrape time. */
  addCollector(collector: ScrapeCollector): void {
    this.scraper.add(collector);
  }

  /** Every metric in Prometheus' text format, the collectors read first (within the budget). */
  async scrape(): Promise<string> {
    await this.scraper.collect();
    return this.registry.metrics();
  }

  private counter(name: string, help: string, labelNames: string[] = []) {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }
}
