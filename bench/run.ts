/**
 * `npm run bench [name…]`: runs the benchmarks in sequence (all, or the named ones). Each module
 * exports `run()`, which prints its own results. Add new benchmarks to this list.
 */
import { cleanUpAll } from './interrupt';

const BENCHES: Record<string, () => Promise<{ run(): Promise<void> }>> = {
  'session-append': () => import('./session-append.bench'),
  dispatch: () => import('./dispatch.bench'),
  turn: () => import('./turn.bench'),
  redact: () => import('./redact.bench'),
  deltas: () => import('./deltas.bench'),
};

async function main(names: string[]): Promise<void> {
  const unknown = names.filter((n) => !(n in BENCHES));
  if (unknown.length) {
    console.error(
      `unknown benchmark(s): ${unknown.join(', ')}; known: ${Object.keys(BENCHES).join(', ')}`,
    );
    process.exit(2);
  }
  for (const name of names.length ? names : Object.keys(BENCHES)) {
    const started = Date.now();
    console.log(`\n== ${name}`);
    try {
      await (await BENCHES[name]()).run();
      console.log(`== ${name} done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    } catch (err) {
      const text = err instanceof Error ? (err.stack ?? err.message) : String(err);
      console.error(`== ${name} failed: ${text.slice(0, 2000)}`);
      process.exitCode = 1;
    }
  }
}

// Stopped (Ctrl-C, kill, a parent gone): what the running benchmark started goes first, then the
// exit a signal would have given. Repeats (a Ctrl-C reaches scripts/bench.js too, which passes it
// on) are ignored while that runs.
let stopping = false;
for (const [signal, number] of [
  ['SIGINT', 2],
  ['SIGTERM', 15],
  ['SIGHUP', 1],
] as const)
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    console.error(`\n== ${signal}: removing what the benchmark started`);
    void cleanUpAll().finally(() => process.exit(128 + number));
  });

void main(process.argv.slice(2));
