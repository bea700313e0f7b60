import { Logger } from '@nestjs/common';
import { Counter } from 'prom-client';

/** Gauges whose values are read when Prometheus scrapes (from Redis, the agent registry). */
export interface ScrapeCollector {
  /** Drops every value: a scrape that could not read them shows none rather than old ones. */
  clear(): void;
  /**
   * Reads the values; the function it resolves with sets them, and is called only when the
   * read finished within the budget. `failed` reports a part it could not read (it goes on
   * with the rest).
   */
  read(failed: (err: unknown) => void): Promise<() => void>;
}

/** A scrape waits this long for its reads: well within Prometheus' 10 s scrape timeout. */
export const COLLECT_BUDGET_MS = 2000;
const WARN_EVERY_MS = 60_000;

/**
 * Runs the collectors of one scrape within a time budget: a slow or unreachable Redis leaves
 * its gauges out of that scrape (counted in loom_metrics_collect_errors_total) rather than
 * hold the scrape until Prometheus gives up on it.
 */
export class Scraper {
  private readonly log = new Logger('Metrics');
  private readonly collectors: ScrapeCollector[] = [];
  private lastWarning = 0;
  /** The read scrapes share while it runs. */
  private running?: Promise<void>;

  constructor(
    private readonly errors: Counter,
    private readonly budgetMs = COLLECT_BUDGET_MS,
  ) {}

  add(collector: ScrapeCollector): void {
    this.collectors.push(collector);
  }

  /**
   * Clears and reads every collector, side by side; resolves within the budget. A scrape that
   * comes while a read runs shares it: /metrics is open unless LOOM_METRICS_TOKEN is set, and a
   * flood of scrapes would otherwise be a flood of reads (a Redis script per agent type).
   */
  collect(): Promise<void> {
    this.running ??= Promise.all(this.collectors.map((c) => this.collectOne(c)))
      .then(() => undefined)
      .finally(() => (this.running = undefined));
    return this.running;
  }

  private async collectOne(collector: ScrapeCollector): Promise<void> {
    collector.clear();
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    // A part that fails after the budget ran out is not counted again: the scrape already was.
    const failed = (err: unknown) => settled || this.failed(err);
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`no answer within ${this.budgetMs} ms`)),
        this.budgetMs,
      );
    });
    try {
      const apply = await Promise.race([collector.read(failed), late]);
      apply();
    } catch (err) {
      this.failed(err);
    } finally {
      settled = true;
      clearTimeout(timer);
    }
  }

  private failed(err: unknown): void {
    this.errors.inc();
    if (Date.now() - this.lastWarning < WARN_EVERY_MS) return;
    this.lastWarning = Date.now();
    const reason = err instanceof Error ? err.message : String(err);
    this.log.warn(`metrics left out of a scrape: ${reason}`);
  }
}
