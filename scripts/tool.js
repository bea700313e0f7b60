#!/usr/bin/env node
// `npm run agents:retire | session:import-legacy | migration:run -- …`: reads the command's
// arguments (scripts/lib/tool-args.js), then builds and runs it. `--help` or a bad argument is
// answered before the build, which takes half a minute and more.
const { spawnSync } = require('child_process');
const path = require('path');
const { toolArgsOrExit } = require('./lib/tool-args');

const root = path.resolve(__dirname, '..');
const [tool, ...args] = process.argv.slice(2);
const dist = toolArgsOrExit(tool, args);

function run(command, argv) {
  const res = spawnSync(command, argv, { cwd: root, stdio: 'inherit' });
  if (res.error) throw res.error;
  if (res.status !== 0) process.exit(res.status ?? 1);
}

run(process.execPath, [path.join(root, 'scripts', 'build.js')]);
run(process.execPath, [path.join(root, dist), ...args]);
