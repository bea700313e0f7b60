/** One sample of a Prometheus text exposition: its labels and value. */
export interface PromSample {
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/**
 * The samples of a scrape by metric name (`# HELP` and `# TYPE` lines skipped). Label values
 * are unescaped as the format escapes them (`\\`, `\"`, `\n`).
 */
export function parsePrometheusText(text: string): Map<string, PromSample[]> {
  const out = new Map<string, PromSample[]>();
  for (const line of text.split('\n')) {
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, name, raw] of (match[2] ?? '').matchAll(LABEL))
      labels[name] = raw.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    out.set(match[1], [...(out.get(match[1]) ?? []), { labels, value: Number(match[3]) }]);
  }
  return out;
}

/**
 * The samples of one metric as `{ "<label values joined by />": value }` (`""` without
 * labels), for exact comparisons: `{ "labor-law/completed": 1 }`.
 */
export function promSeries(samples: Map<string, PromSample[]>, name: string) {
  return Object.fromEntries(
    (samples.get(name) ?? []).map((s) => [Object.values(s.labels).join('/'), s.value]),
  );
}
