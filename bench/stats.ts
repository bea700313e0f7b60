/** Percentiles and a plain-text table for the benchmarks. */

export interface Summary {
  n: number;
  p50: number;
  p99: number;
  mean: number;
  min: number;
  max: number;
}

/** Nearest-rank percentile (p in 0..100) of samples sorted ascending. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(Math.max(rank, 1), sorted.length) - 1];
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    mean: sorted.reduce((sum, x) => sum + x, 0) / (sorted.length || 1),
    min: sorted[0] ?? Number.NaN,
    max: sorted[sorted.length - 1] ?? Number.NaN,
  };
}

/** Times `fn` `count` times in a row (after `warmup` untimed calls); milliseconds per call. */
export async function sample(
  fn: () => Promise<unknown>,
  opts: { count: number; warmup: number; budgetMs?: number; minCount?: number },
): Promise<number[]> {
  for (let i = 0; i < opts.warmup; i++) await fn();
  const out: number[] = [];
  const started = performance.now();
  while (out.length < opts.count) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
    const overBudget = opts.budgetMs !== undefined && performance.now() - started > opts.budgetMs;
    if (overBudget && out.length >= (opts.minCount ?? 1)) break;
  }
  return out;
}

/** Left-aligned first column, right-aligned others. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

export const ms = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : 'n/a');
