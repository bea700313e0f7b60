import { randomBytes } from 'crypto';
import { createTestDatabase, createTestPrefix } from '@loom/testing';
const { APPS, startApp, stopAll, freePort, waitFor, signJwt } = require('../scripts/lib/processes');

export interface RunningSystem {
  base: string;
  env: Record<string, string>;
  children: Array<import('child_process').ChildProcess & { app: string; lines: string[] }>;
  token(tenantId: string, userId: string): string;
  restart(app?: string): Promise<void>;
  stop(): Promise<void>;
}

/** Every app as a real process on its own database and key prefix (built by `npm run build`). */
export async function startSystem(extraEnv: Record<string, string> = {}): Promise<RunningSystem> {
  const db = await createTestDatabase('loom_sys');
  const prefix = createTestPrefix('loomsys');
  const port = await freePort();
  const jwtSecret = randomBytes(24).toString('hex');
  const env = {
    MYSQL_URL: db.url,
    LOOM_KEY_PREFIX: prefix.prefix,
    LOOM_JWT_SECRET: jwtSecret,
    LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
    PORT: String(port),
    LOG_LEVEL: 'info',
    ...extraEnv,
  };
  const base = `http://127.0.0.1:${port}`;
  const sys: RunningSystem = {
    base,
    env,
    children: APPS.map((app: string) => startApp(app, env)),
    token: (tenantId, userId) => signJwt({ sub: userId, tid: tenantId }, jwtSecret),
    restart: async (app?: string) => {
      const targets = sys.children.filter((c) => !app || c.app === app);
      await stopAll(targets, 'SIGKILL');
      sys.children = sys.children.map((c) => (targets.includes(c) ? startApp(c.app, env) : c));
      await ready(sys);
    },
    stop: async () => {
      await stopAll(sys.children);
      await Promise.all([db.drop(), prefix.cleanup()]);
    },
  };
  await ready(sys);
  return sys;
}

async function ready(sys: RunningSystem): Promise<void> {
  await waitFor(async () => (await fetch(`${sys.base}/health`)).status === 200, {
    what: 'orchestrator health',
    timeoutMs: 60000,
  });
  const token = sys.token('probe', 'probe');
  await waitFor(
    async () => {
      const res = await fetch(`${sys.base}/v1/agents`, {
        headers: { authorization: `Bearer ${token}` },
      });
      return res.ok && ((await res.json()) as { items: unknown[] }).items.length >= 3;
    },
    { what: 'three agents registered', timeoutMs: 60000 },
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
    return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
  };
}
