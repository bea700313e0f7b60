#!/usr/bin/env node
// npm run start:all: builds if needed, then runs every app, one process each, in the foreground.
// SIGINT/SIGTERM stops them all; if one app exits, the others are stopped too.
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { root, APPS, startApp, stopAll } = require('./lib/processes');

if (!APPS.every((app) => fs.existsSync(path.join(root, 'dist', 'apps', app, 'main.js')))) {
  execFileSync(process.execPath, [path.join(root, 'scripts', 'build.js')], { stdio: 'inherit' });
}
const children = APPS.map((app) => startApp(app, {}, { silent: false }));
let stopping = false;
const stop = async (code) => {
  if (stopping) return;
  stopping = true;
  await stopAll(children);
  process.exit(code);
};
process.on('SIGINT', () => stop(0));
process.on('SIGTERM', () => stop(0));
for (const c of children)
  c.on(
    'exit',
    (code) =>
      !stopping &&
      (console.error(`${c.app} exited (${code}); stopping the others`), stop(code || 1)),
  );
