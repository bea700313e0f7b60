// Preloaded (node -r) into apps that start:all runs in a process group of their own: a Ctrl-C
// then reaches only start:all, which stops them in order, but a start:all killed outright
// (kill -9, the OOM killer) cannot. An app whose parent went away stops as on SIGTERM.
const parent = process.ppid;
const timer = setInterval(() => {
  if (process.ppid === parent) return;
  clearInterval(timer);
  process.kill(process.pid, 'SIGTERM');
}, 1000);
timer.unref();
