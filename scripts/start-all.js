#!/usr/bin/env node
// npm run start:all: builds if needed, then runs every app, one process each, in the foreground.
// SIGINT/SIGTERM stops them all; if one app exits, the others are stopped too.
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { root, APPS, startApp, stopAll } = require('./lib/processes');
const { takesNoArguments } = require('./lib/no-arguments');

const USAGE = `usage: npm run start:all
Builds when a source changed since the last build, then runs every app (${APPS.join(', ')}),
one process each, in the foreground, configured by the environment (docs/configuration.md).
Ctrl-C stops them all; so does any one of them exiting.`;

takesNoArguments(USAGE);

/** Newest modification time of the TypeScript sources under `dir`. */
function newestSource(dir) {
  let newest = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') newest = Math.max(newest, newestSource(full));
    } else if (entry.name.endsWith('.ts')) newest = Math.max(newest, fs.statSync(full).mtimeMs);
  }
  return newest;
}

// Builds when an app was never built or a source changed since the last build (each build
// rewrites every dist/apps/<app>/main.js).
const built = APPS.map((app) => path.join(root, 'dist', 'apps', app, 'main.js'));
const stale =
  !built.every((f) => fs.existsSync(f)) ||
  Math.max(newestSource(path.join(root, 'apps')), newestSource(path.join(root, 'libs'))) >
    Math.min(...built.map((f) => fs.statSync(f).mtimeMs));
if (stale) {
  execFileSync(process.execPath, [path.join(root, 'scripts', 'build.js')], { stdio: 'inherit' });
}
const children = APPS.map((app) => startApp(app, {}, { silent: false, detached: true }));
// Detached, the apps would outlive a crash of this script: take them along.
process.on('exit', () => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL')));
let stopping = false;
const stop = async (code) => {
  if (stopping) return;
  stopping = true;
  // The orchestrator first, so the turns it is finishing still have their agents; then the
  // agents, each finishing the work it holds. Past the grace a process is killed, and its
  // unfinished work is recovered (docs/recovery.md).
  const orchestrator = (c) => c.app === 'orchestrator';
  await stopAll(children.filter(orchestrator), 'SIGTERM', 30_000);
  await stopAll(children.filter((c) => !orchestrator(c)), 'SIGTERM', 15_000);
  process.exit(code);
};
// A second signal (Ctrl-C again) while stopping: no more waiting.
const onSignal = () => {
  if (!stopping) return void stop(0);
  children.forEach((c) => c.exitCode === null && c.kill('SIGKILL'));
  process.exit(1);
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
process.on('SIGHUP', onSignal);
// `npm run start:all` runs this under `sh -c`: a SIGTERM to npm reaches the shell, which (dash)
// does not pass it on, and this process is left to init with every app running. A parent that
// went away means stop, as the signal meant.
const parent = process.ppid;
const orphaned = setInterval(() => {
  if (process.ppid === parent) return;
  clearInterval(orphaned);
  void stop(0);
}, 500);
orphaned.unref();
for (const c of children)
  c.on(
    'exit',
    (code) =>
      !stopping &&
      (console.error(`${c.app} exited (${code}); stopping the others`), stop(code || 1)),
  );
