#!/usr/bin/env node
// `npm run chaos -- [--minutes N] [--seed S]`: builds, then runs the randomized crash audit
// (libs/testing/src/chaos) against every app as real processes; see docs/recovery.md,
// "Chaos audit".
const { spawnSync } = require('child_process');
const path = require('path');
const { root } = require('./transpile');
const { chaosArgsOrExit } = require('./lib/chaos-args');

function run(command, args) {
  const res = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (res.error) throw res.error;
  if (res.status !== 0) process.exit(res.status ?? 1);
}

// Answered or refused before the build: `--help` or a typo must not cost one.
chaosArgsOrExit(process.argv.slice(2));

run(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build']);
run(process.execPath, [
  path.join(root, 'dist', 'libs', 'testing', 'src', 'chaos', 'cli.js'),
  ...process.argv.slice(2),
]);
