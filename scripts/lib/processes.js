// Shared by the demo, start:all and the system tests: start apps as real processes, wait for them, stop them.
const { spawn } = require('child_process');
const crypto = require('crypto');
const net = require('net');
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const fs = require('fs');

// Every app under apps/ with a main.ts, orchestrator first; `embedded` hosts all of them in one
// process and is started only on its own. A scaffolded agent is picked up without editing this.
const APPS = [
  'orchestrator',
  ...fs
    .readdirSync(path.join(root, 'apps'))
    .filter(
      (d) =>
        d !== 'orchestrator' &&
        d !== 'embedded' &&
        fs.existsSync(path.join(root, 'apps', d, 'src', 'main.ts')),
    )
    .sort(),
];

// `detached`: a process group of its own, so a terminal's Ctrl-C reaches only the parent, which
// then stops the apps in its own order (start:all: the orchestrator before its agents).
function startApp(app, env, { silent = true, onLine, detached = false } = {}) {
  const main = path.join(root, 'dist', 'apps', app, 'main.js');
  // Every app watches its parent: detached, it no longer dies with its parent's process group,
  // and either way a parent killed outright (`kill`, a CI job's time-out) cannot stop it, which
  // would leave it running for good with its port, database and data directory.
  const args = ['-r', path.join(__dirname, 'exit-with-parent.js'), main];
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
  });
  child.lines = [];
  for (const stream of [child.stdout, child.stderr]) {
    let buf = '';
    stream.on('data', (d) => {
      buf += d.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        child.lines.push(line);
        if (onLine) onLine(app, line);
        else if (!silent) process.stdout.write(`[${app}] ${line}\n`);
      }
    });
  }
  child.app = app;
  return child;
}

async function stopAll(children, signal = 'SIGTERM', graceMs = 5000) {
  await Promise.all(
    children.map(
      (c) =>
        new Promise((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          const t = setTimeout(() => c.kill('SIGKILL'), graceMs);
          c.once('exit', () => {
            clearTimeout(t);
            resolve();
          });
          c.kill(signal);
        }),
    ),
  );
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

async function waitFor(check, { timeoutMs = 30000, intervalMs = 200, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

/** A HS256 JWT, as API.md's clients send it. */
function signJwt(claims, secret, ttlSeconds = 3600) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ ...claims, iat: Math.floor(Date.now() / 1000), exp: Math.floor(Date.now() / 1000) + ttlSeconds })}`;
  return `${body}.${crypto.createHmac('sha256', secret).update(body).digest('base64url')}`;
}

module.exports = { root, APPS, startApp, stopAll, freePort, waitFor, signJwt };
