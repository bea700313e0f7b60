#!/usr/bin/env node
// npm run demo: seed 000's legal consultation end to end. Uses Redis + MySQL when both answer
// (every app a separate process), otherwise the embedded profile (one process, JSON files, TCP).
const crypto = require('crypto');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { root, APPS, startApp, stopAll, freePort, waitFor, signJwt } = require('./lib/processes');
const { takesNoArguments } = require('./lib/no-arguments');
const { playConsultation } = require('./lib/consultation');

const USAGE = `usage: npm run demo
Builds (transpiles), then plays seed 000's legal consultation through every app: on
Redis + MySQL when both answer (each app a process), otherwise the embedded profile (one process,
JSON files). LOOM_DEMO_PROFILE=embedded|distributed skips the probe; REDIS_URL and MYSQL_URL name
the servers (the demo uses a database and key prefix of its own, removed after).`;

takesNoArguments(USAGE);

// Unset or empty (as the apps read them): the local defaults.
const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const MYSQL_URL = process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/loom';
/**
 * MYSQL_URL with its database replaced by the demo's own (created by the apps, dropped after):
 * its user, server and query (`?ssl=…`) stay as they are.
 */
function demoMysqlUrl(database) {
  const u = new URL(MYSQL_URL);
  u.pathname = `/${database}`;
  return u.toString();
}

/** Whether host:port of `url` accepts a connection (`defaultPort` when the URL names none). */
function reachable(url, defaultPort) {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(
      { host: u.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(u.port || defaultPort) },
      () => (s.end(), resolve(true)),
    );
    s.setTimeout(1500, () => (s.destroy(), resolve(false)));
    s.on('error', () => resolve(false));
  });
}

async function main() {
  const forced = process.env.LOOM_DEMO_PROFILE; // 'embedded' or 'distributed' to skip the probe
  if (forced && forced !== 'embedded' && forced !== 'distributed') {
    console.error(`demo: LOOM_DEMO_PROFILE must be embedded or distributed, not "${forced}"`);
    process.exit(2);
  }
  execFileSync(process.execPath, [path.join(root, 'scripts', 'build.js')], { stdio: 'inherit' });
  const distributed = forced
    ? forced === 'distributed'
    : (await reachable(REDIS_URL, 6379)) && (await reachable(MYSQL_URL, 3306));
  const why = forced
    ? `LOOM_DEMO_PROFILE=${forced}`
    : distributed
      ? 'Redis and MySQL answer'
      : 'Redis or MySQL does not answer';
  const jwtSecret = crypto.randomBytes(24).toString('hex');
  const port = await freePort();
  const children = [];
  let dataDir;
  const prefix = `loomdemo:${crypto.randomBytes(3).toString('hex')}:`;
  const database = `loom_demo_${crypto.randomBytes(3).toString('hex')}`;
  if (distributed) {
    console.log(
      `${why}: distributed profile, ${APPS.length} processes (key prefix ${prefix}, database ${database})`,
    );
    const env = {
      REDIS_URL,
      MYSQL_URL: demoMysqlUrl(database),
      LOOM_KEY_PREFIX: prefix,
      LOOM_JWT_SECRET: jwtSecret,
      LOOM_AGENT_SECRET: crypto.randomBytes(24).toString('hex'),
      PORT: String(port),
      LOG_LEVEL: 'warn',
    };
    for (const app of APPS) children.push(startApp(app, env, { silent: false }));
  } else {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'loom-demo-'));
    console.log(`${why}: embedded profile (one process, JSON files, TCP transport)`);
    children.push(
      startApp(
        'embedded',
        {
          LOOM_PROFILE: 'embedded',
          LOOM_DATA_DIR: dataDir,
          PORT: String(port),
          LOG_LEVEL: 'warn',
          LOOM_JWT_SECRET: jwtSecret,
        },
        { silent: false },
      ),
    );
  }
  const base = `http://127.0.0.1:${port}`;
  const token = signJwt({ sub: 'demo-user', tid: 'demo-tenant' }, jwtSecret);
  // Everything the demo made goes, also when it is interrupted (Ctrl-C, SIGTERM).
  let tornDown;
  const teardown = () =>
    (tornDown ??= (async () => {
      await stopAll(children);
      if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
      if (distributed) await cleanup(prefix, database);
    })());
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ])
    process.once(signal, () => {
      console.error(`\n${signal}: stopping the apps and removing the demo's data`);
      teardown().finally(() => process.exit(code));
    });
  // An app that exits before the demo ends (an environment it refuses, say) ends the demo at
  // once: its own line says why, and nothing would answer the waits below.
  const exited = new Promise((_, reject) => {
    for (const c of children)
      c.once('exit', (code, signal) => {
        if (!tornDown)
          reject(
            new Error(
              `${c.app} exited (${code !== null ? `code ${code}` : signal}): see its output above`,
            ),
          );
      });
  });
  exited.catch(() => undefined);
  try {
    const playing = consultation(base, token);
    playing.catch(() => undefined); // the race below reports it, unless an app exited first
    await Promise.race([exited, playing]);
    console.log(`\nDone (${distributed ? 'distributed: Redis + MySQL' : 'embedded'} profile).`);
  } finally {
    await teardown();
  }
}

/** Waits for the orchestrator and the three agents, then plays the consultation. */
async function consultation(base, token) {
  await waitFor(async () => (await fetch(`${base}/health`)).status === 200, {
    what: 'the orchestrator',
    timeoutMs: 60000,
  });
  await waitFor(
    async () => {
      const res = await fetch(`${base}/v1/agents`, {
        headers: { authorization: `Bearer ${token}` },
      });
      return res.ok && (await res.json()).items.length >= 3;
    },
    { what: 'three agents to register', timeoutMs: 60000 },
  );
  await playConsultation(base, token);
}

/**
 * Removes the demo's keys and database, each on its own: a Redis that refuses the demo (the
 * reason its apps exited, perhaps) must not keep the database the apps had already created, nor
 * hide why the demo failed. What it cannot remove it names in a line.
 */
async function cleanup(prefix, database) {
  const Redis = require('ioredis');
  const mysql = require('mysql2/promise');
  const redis = new Redis(REDIS_URL, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  // What Redis answered (NOAUTH …), which the failed connect reports only as a closed connection.
  let refusal;
  redis.on('error', (err) => (refusal = err));
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await redis.del(...keys);
    } while (cursor !== '0');
  } catch (err) {
    console.error(
      `demo: could not remove the keys ${prefix}* from Redis: ${(refusal ?? err).message}`,
    );
  } finally {
    redis.disconnect();
  }
  try {
    // Connected as the apps are: the same server, user and TLS options (MYSQL_URL, MYSQL_SSL_CA).
    const {
      mysqlConnectionConfig,
    } = require('../dist/libs/session/src/store/mysql/mysql-connection');
    const { database: _, ...server } = mysqlConnectionConfig(
      MYSQL_URL,
      process.env.MYSQL_SSL_CA || undefined,
    );
    const conn = await mysql.createConnection(server);
    try {
      await conn.query(`DROP DATABASE IF EXISTS \`${database}\``);
    } finally {
      await conn.end();
    }
  } catch (err) {
    console.error(`demo: could not drop the database ${database}: ${err.message}`);
  }
}

main().catch((err) => {
  console.error(`demo failed: ${err.message}`);
  process.exit(1);
});
