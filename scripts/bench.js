#!/usr/bin/env node
// `npm run bench [name…]`: builds, then runs dist/bench/run.js (the benchmarks listed in bench/run.ts).
// A parent killed outright (npm, a CI job's time-out) stops this script as a SIGTERM would.
require('./lib/exit-with-parent');
const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { root } = require('./transpile');

/**
 * Runs a step and resolves with its exit code. A SIGINT, SIGTERM or SIGHUP this script gets is
 * passed on to the step, which stops (the benchmarks remove their redis-server, apps and
 * database: bench/interrupt.ts), and then this script exits as that signal would have ended it.
 */
function run(command, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: root, stdio: 'inherit' });
    let stoppedBy = null;
    const pass = (signal) => {
      stoppedBy ??= signal;
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    };
    const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'];
    for (const s of signals) process.on(s, pass);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      for (const s of signals) process.off(s, pass);
      if (stoppedBy) {
        process.kill(process.pid, stoppedBy); // no handler left: ends this script as the signal does
        return;
      }
      resolve(code ?? (signal ? 128 + os.constants.signals[signal] : 1));
    });
  });
}

const USAGE = `usage: npm run bench [-- <name>…]   (all when none is named)
  session-append  one append to a long conversation vs rewriting a whole-document session
  dispatch        a no-op agent hop over Loom's Redis Streams transport vs the stock Nest Redis echo
  turn            a whole turn through the four apps as processes, throughput at 64 conversations,
                  the targets of issues 3 and 4, and where a turn's time goes
  redact          PII redaction of 100 KB inputs, ordinary and adversarial (no database needed)
  deltas          streamed deltas on the orchestrator's side: shared readers vs a connection per
                  subscription, standalone and on a private Redis Cluster (latency, connections)
Needs MySQL and Redis: TEST_MYSQL_URL (a server, default mysql://root@127.0.0.1:3306) and
TEST_REDIS_URL (default redis://127.0.0.1:6379); redis-server on PATH for the private instances.
Each benchmark uses a database and Redis keys of its own and removes them.`;
if (process.argv.slice(2).some((a) => a === '--help' || a === '-h')) {
  console.log(USAGE);
  process.exit(0);
}
// An unknown name is refused before the build, as dist/bench/run.js would after it: the
// benchmarks are bench/<name>.bench.ts, as bench/run.ts lists them.
const known = fs
  .readdirSync(path.join(root, 'bench'))
  .filter((f) => f.endsWith('.bench.ts'))
  .map((f) => f.slice(0, -'.bench.ts'.length));
const unknown = process.argv.slice(2).filter((n) => !known.includes(n));
if (unknown.length) {
  console.error(`unknown benchmark(s): ${unknown.join(', ')}; known: ${known.join(', ')}`);
  process.exit(2);
}

(async () => {
  const built = await run(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build']);
  if (built !== 0) process.exit(built);
  // Preloaded as into the apps: this script killed outright (kill -9), the benchmarks still stop
  // and remove what they started.
  process.exitCode = await run(process.execPath, [
    '-r',
    path.join(__dirname, 'lib', 'exit-with-parent.js'),
    path.join(root, 'dist', 'bench', 'run.js'),
    ...process.argv.slice(2),
  ]);
})().catch((err) => {
  console.error(`bench: ${err.message}`);
  process.exit(1);
});
