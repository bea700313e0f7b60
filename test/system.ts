import { ChildProcess } from 'child_process';
import { randomBytes } from 'crypto';
import {
  createTestDatabase,
  createTestPrefix,
  deleteKeysUnder,
  TEST_REDIS_URL,
} from '@loom/testing';
const { APPS, startApp, stopAll, freePort, waitFor, signJwt } = require('../scripts/lib/processes');

export type AppProcess = ChildProcess & { app: string; lines: string[] };

export interface SystemOptions {
  /** Environment for every app (REDIS_URL defaults to the shared test Redis). */
  env?: Record<string, string>;
  /** Extra environment per app. */
  appEnv?: Record<string, Record<string, string>>;
  /** How many processes of each app (default 1). */
  instances?: Record<string, number>;
  /** Apps not to start at all (e.g. to start an agent later). */
  without?: string[];
}

export interface RunningSystem {
  base: string;
  env: Record<string, string>;
  children: AppProcess[];
  token(tenantId: string, userId: string): string;
  /** SIGKILLs every process (or those of one app) and starts them again; waits until ready. */
  restart(app?: string): Promise<void>;
  /** Starts one more process of `app`. */
  start(app: string, env?: Record<string, string>): AppProcess;
  /** Sends `signal` to a process and waits until it is gone. */
  kill(child: AppProcess, signal?: NodeJS.Signals): Promise<void>;
  processes(app: string): AppProcess[];
  /** Every log line every process printed so far, parsed when JSON. */
  logs(): Array<{ app: string; line: string; json: Record<string, unknown> | null }>;
  /**
   * Waits for the orchestrator's health and for every one of `agentTypes` (by default, those of
   * the agent processes started) to be registered; other agents registered do not count.
   */
  ready(agentTypes?: string[]): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Every app as a real process on its own database and key prefix (built by `npm run build`). A
 * suite that gives its own MYSQL_URL gets no database here; one that gives its own
 * LOOM_KEY_PREFIX has the keys under it removed by `stop()` all the same. If the apps do not get
 * ready, they are stopped and the database and keys removed before this rejects: the suite,
 * which has no system to stop, would leave them on the shared servers.
 */
export async function startSystem(opts: SystemOptions = {}): Promise<RunningSystem> {
  const db = opts.env?.MYSQL_URL ? null : await createTestDatabase('loom_sys');
  const prefix = createTestPrefix('loomsys');
  const port = await freePort();
  const jwtSecret = randomBytes(24).toString('hex');
  const env: Record<string, string> = {
    REDIS_URL: TEST_REDIS_URL,
    ...(db ? { MYSQL_URL: db.url } : {}),
    LOOM_KEY_PREFIX: prefix.prefix,
    LOOM_JWT_SECRET: jwtSecret,
    LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
    PORT: String(port),
    LOG_LEVEL: 'info',
    ...opts.env,
  };
  // The prefixes the apps ran on: a suite's own LOOM_KEY_PREFIX (for all, one app or one
  // process) in place of the one made here. Its keys are on the shared Redis too: stop()
  // removes them.
  const keyPrefixes = new Set<string>();
  const envFor = (app: string, extra: Record<string, string> = {}) => {
    const appEnv = { ...env, ...opts.appEnv?.[app], ...extra };
    if (appEnv.LOOM_KEY_PREFIX) keyPrefixes.add(appEnv.LOOM_KEY_PREFIX);
    return appEnv;
  };
  const base = `http://127.0.0.1:${port}`;
  const exited: AppProcess[] = [];
  const sys: RunningSystem = {
    base,
    env,
    children: [],
    token: (tenantId, userId) => signJwt({ sub: userId, tid: tenantId }, jwtSecret),
    start: (app, extra) => {
      const child: AppProcess = startApp(app, envFor(app, extra));
      child.on('exit', () => exited.push(child));
      sys.children.push(child);
      return child;
    },
    kill: async (child, signal = 'SIGKILL') => {
      await stopAll([child], signal);
      sys.children = sys.children.filter((c) => c !== child);
    },
    processes: (app) => sys.children.filter((c) => c.app === app),
    logs: () =>
      [...exited, ...sys.children].flatMap((c) =>
        c.lines.map((line) => {
          let json: Record<string, unknown> | null = null;
          try {
            json = JSON.parse(line);
          } catch {
            // not a JSON line (e.g. a crash trace)
          }
          return { app: c.app, line, json };
        }),
      ),
    restart: async (app) => {
      const targets = sys.children.filter((c) => !app || c.app === app);
      for (const c of targets) await sys.kill(c);
      for (const c of targets) sys.start(c.app);
      await sys.ready();
    },
    ready: (agentTypes = startedAgentTypes(sys)) => ready(sys, agentTypes),
    stop: async () => {
      await stopAll(sys.children);
      await Promise.all([db?.drop(), ...[...keyPrefixes].map(deleteKeysUnder)]);
    },
  };
  for (const app of APPS as string[]) {
    if (opts.without?.includes(app)) continue;
    for (let i = 0; i < (opts.instances?.[app] ?? 1); i++) sys.start(app);
  }
  try {
    await ready(sys, startedAgentTypes(sys));
  } catch (err) {
    await sys.stop();
    throw err;
  }
  return sys;
}

/** The agent type an agent app registers: apps/<type>-agent, as the built-ins and new:agent name them. */
export function agentTypeOf(app: string): string | null {
  return app.endsWith('-agent') ? app.slice(0, -'-agent'.length) : null;
}

function startedAgentTypes(sys: RunningSystem): string[] {
  const types = sys.children.map((c) => agentTypeOf(c.app));
  return [...new Set(types.filter((t): t is string => t !== null))].sort();
}

async function ready(sys: RunningSystem, agentTypes: string[]): Promise<void> {
  // An orchestrator that exited (a setting it refuses, say) is not waited for a minute.
  const exited = (c: AppProcess) => c.exitCode !== null || c.signalCode !== null;
  let gone: AppProcess[] = [];
  await waitFor(
    async () => {
      const orchestrators = sys.processes('orchestrator');
      if (orchestrators.length && orchestrators.every(exited)) return (gone = orchestrators);
      return (await fetch(`${sys.base}/health`)).status === 200;
    },
    { what: 'orchestrator health', timeoutMs: 60000 },
  );
  if (gone.length)
    throw new Error(
      `the orchestrator exited before it was ready: ${gone[0].lines.slice(-3).join(' | ')}`,
    );
  const token = sys.token('probe', 'probe');
  await waitFor(
    async () => {
      const res = await fetch(`${sys.base}/v1/agents`, {
        headers: { authorization: `Bearer ${token}` },
      });
      if (!res.ok) return false;
      const items = ((await res.json()) as { items: Array<{ agentType: string }> }).items;
      return agentTypes.every((type) => items.some((a) => a.agentType === type));
    },
    { what: `agents registered: ${agentTypes.join(', ') || 'none'}`, timeoutMs: 60000 },
  );
}

/** A small HTTP client for the tests. */
export function client(base: string, token: string | null) {
  return async (
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ) => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        'content-type': 'application/json',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...headers,
      },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: any = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
}

/** A turn asked for as a stream: its `delta` texts in order and the `done` TurnView. */
export async function streamTurn(
  base: string,
  token: string,
  conversationId: string,
  content: string,
): Promise<{ deltas: string[]; done: any }> {
  const res = await fetch(`${base}/v1/conversations/${conversationId}/messages`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({ content }),
  });
  const text = await res.text();
  const deltas = [...text.matchAll(/event: delta\ndata: (.*)\n/g)].map(
    (m) => JSON.parse(m[1]).text as string,
  );
  const done = /event: done\ndata: (.*)\n/.exec(text);
  if (!done) throw new Error(`no done event in ${res.status} ${text.slice(0, 300)}`);
  return { deltas, done: JSON.parse(done[1]) };
}

/**
 * `app` (the embedded app, or one app in the embedded profile) as a process on a free port, with
 * REDIS_URL and MYSQL_URL pointing at a closed port so it could not use Redis or MySQL even by
 * mistake.
 */
export async function startEmbeddedApp(
  app: string,
  dataDir: string,
  env: Record<string, string>,
): Promise<{ child: AppProcess; base: string; port: number }> {
  const port = await freePort();
  const child = startApp(app, {
    LOOM_PROFILE: 'embedded',
    LOOM_DATA_DIR: dataDir,
    PORT: String(port),
    REDIS_URL: 'redis://127.0.0.1:1',
    MYSQL_URL: 'mysql://root@127.0.0.1:1/none',
    ...env,
  }) as AppProcess;
  return { child, base: `http://127.0.0.1:${port}`, port };
}

/** The embedded profile as one process (every app in it) on a free port. */
export function startEmbedded(
  dataDir: string,
  jwtSecret: string,
): Promise<{ child: AppProcess; base: string }> {
  return startEmbeddedApp('embedded', dataDir, { LOOM_JWT_SECRET: jwtSecret, LOG_LEVEL: 'warn' });
}
