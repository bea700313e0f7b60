// Preloaded (node -r) into every app scripts/lib/processes.js starts (start:all, the demo, the
// benchmarks, the system tests): a parent killed outright (kill, kill -9, the OOM killer, a CI
// job's time-out) cannot stop its apps, and start:all's run in a process group of their own,
// which a Ctrl-C does not reach. An app whose parent went away stops as on SIGTERM.
const parent = process.ppid;
const timer = setInterval(() => {
  if (process.ppid === parent) return;
  clearInterval(timer);
  process.kill(process.pid, 'SIGTERM');
}, 1000);
timer.unref();
