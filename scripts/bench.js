#!/usr/bin/env node
// `npm run bench [name…]`: builds, then runs dist/bench/run.js (the benchmarks listed in bench/run.ts).
const { spawnSync } = require('child_process');
const path = require('path');
const { root } = require('./transpile');

function run(command, args) {
  const res = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (res.error) throw res.error;
  if (res.status !== 0) process.exit(res.status ?? 1);
}

run(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build']);
run(process.execPath, [path.join(root, 'dist', 'bench', 'run.js'), ...process.argv.slice(2)]);
