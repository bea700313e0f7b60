#!/usr/bin/env node
// `npm run bench:compare -- <git rev> [rounds]`: the turn benchmark of an earlier revision and of
// this checkout, run alternately (default 3 rounds each), so both see the same machine. This
// machine's speed drifts within minutes; ratios are only meaningful from one such run.
// The revision is checked out into a temporary git worktree that shares this node_modules.
const { execFileSync, spawn, spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const root = path.resolve(__dirname, '..');
const USAGE = 'usage: npm run bench:compare -- <git rev> [rounds, default 3]';
const [rev, roundsArg, extra] = process.argv.slice(2);
if (rev === '--help' || rev === '-h') {
  console.log(USAGE);
  process.exit(0);
}
// Dropped, an extra argument (`HEAD~1 3 turn`, as if it took a benchmark's name) would still
// start minutes of benchmarks.
if (extra !== undefined) {
  console.error(`bench:compare: unexpected argument ${extra}; ${USAGE}`);
  process.exit(2);
}
const rounds = Number(roundsArg ?? 3);
if (!rev || rev.startsWith('-') || !Number.isInteger(rounds) || rounds < 1) {
  console.error(USAGE);
  process.exit(2);
}

const git = (...args) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();
let commit;
try {
  commit = execFileSync('git', ['rev-parse', '--verify', '--quiet', `${rev}^{commit}`], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  }).trim();
} catch {
  console.error(`bench:compare: ${rev} names no commit of this repository`);
  process.exit(2);
}
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-compare-'));
const trees = { [`${rev} (${commit.slice(0, 7)})`]: dir, 'this checkout': root };

// Ctrl-C (or a SIGTERM) stops the child at work and lands in the `finally` below, which removes
// the worktree: Node's default for these signals would end this process at once, leaving it.
let interrupted = null;
let current = null;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
  process.on(signal, () => {
    interrupted = signal;
    current?.kill(signal);
  });

/** Runs a child to its end: its stdout, or an error naming why it did not succeed. */
function run(args, cwd) {
  if (interrupted) return Promise.reject(new Error(`interrupted (${interrupted})`));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    current = child;
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      current = null;
      if (interrupted) reject(new Error(`interrupted (${interrupted})`));
      else if (code !== 0)
        reject(Object.assign(new Error(`${args[0]} exited ${code ?? signal}`), { stdout, stderr }));
      else resolve(stdout);
    });
  });
}

/** One turn benchmark in `tree`: the "whole turn" row (p50, p99 ms, turns/s), or null. */
async function turnBench(tree) {
  const out = await run([path.join(tree, 'dist', 'bench', 'run.js'), 'turn'], tree).catch((err) => {
    if (interrupted) throw err;
    return `${err.stdout ?? ''}${err.stderr ?? ''}`;
  });
  const row = /whole turn\s+([\d.]+)\s+([\d.]+)\s+\d+\s+([\d.]+) turns/.exec(out);
  if (!row) {
    process.stderr.write(out);
    return null;
  }
  return { p50: Number(row[1]), p99: Number(row[2]), perSecond: Number(row[3]) };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function compare() {
  git('worktree', 'add', '--detach', dir, commit);
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  for (const tree of Object.values(trees))
    await run([path.join(tree, 'scripts', 'build.js')], tree);
  const results = Object.fromEntries(Object.keys(trees).map((name) => [name, []]));
  for (let i = 1; i <= rounds; i++) {
    for (const [name, tree] of Object.entries(trees)) {
      const r = await turnBench(tree);
      if (!r) throw new Error(`the turn benchmark of ${name} failed`);
      results[name].push(r);
      console.log(
        `round ${i} ${name}: turn p50 ${r.p50} ms, p99 ${r.p99} ms, ${r.perSecond} turns/s @64`,
      );
    }
  }
  const [before, after] = Object.values(results);
  const p50 = median(after.map((r, i) => r.p50 / before[i].p50));
  const tps = median(after.map((r, i) => r.perSecond / before[i].perSecond));
  console.log(
    `\nthis checkout / ${rev}, median of ${rounds} paired rounds: turn p50 ${p50.toFixed(2)}×, ` +
      `throughput ${tps.toFixed(2)}×`,
  );
}

compare()
  .catch((err) => {
    console.error(`bench:compare: ${err.message}`);
    process.exitCode = interrupted ? 130 : 1;
  })
  .finally(() => {
    spawnSync('git', ['worktree', 'remove', '--force', dir], { cwd: root });
    fs.rmSync(dir, { recursive: true, force: true });
  });
