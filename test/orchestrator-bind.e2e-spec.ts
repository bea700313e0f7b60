import { randomBytes } from 'crypto';
import { mkdtempSync, rmSync } from 'fs';
import { connect } from 'net';
import { networkInterfaces, tmpdir } from 'os';
import { join } from 'path';
import { EMBEDDED_JWT_SECRET } from '../apps/orchestrator/src/app.module';
import { AppProcess, startEmbeddedApp } from './system';
const { stopAll, waitFor } = require('../scripts/lib/processes');

/** Whether a TCP connection to host:port is accepted. */
function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 2000 });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

/**
 * An orchestrator started without LOOM_JWT_SECRET (LOOM_PROFILE=embedded) verifies tokens with
 * a secret anyone can read in the source, so it must not be reachable from another machine.
 */
describe('system: an orchestrator without its own JWT secret', () => {
  let dataDir: string;
  const children: AppProcess[] = [];

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-bind-test-'));
  });
  afterAll(async () => {
    await stopAll(children);
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** An orchestrator on a free port, healthy on loopback; its JWT secret as given. */
  async function start(jwtSecret: string): Promise<{ child: AppProcess; port: number }> {
    // Each its own data directory: one process at a time may use one.
    const own = join(dataDir, String(children.length));
    const { child, base, port } = await startEmbeddedApp('orchestrator', own, {
      LOOM_JWT_SECRET: jwtSecret,
      LOOM_AGENT_SECRET: '',
    });
    children.push(child);
    await waitFor(async () => (await fetch(`${base}/health`)).ok, {
      what: 'the orchestrator',
      timeoutMs: 60_000,
    });
    return { child, port };
  }

  it('listens on the loopback interface only, unless it has a secret of its own', async () => {
    const external = Object.values(networkInterfaces())
      .flat()
      .filter((i) => i && i.family === 'IPv4' && !i.internal)
      .map((i) => i!.address);
    const seen: Record<string, boolean[]> = {};
    for (const [name, secret, expectExternal] of [
      ['no secret', '', false],
      ['the built-in secret', EMBEDDED_JWT_SECRET, false],
      ['a secret of its own', randomBytes(24).toString('hex'), true],
    ] as const) {
      const { child, port } = await start(secret);
      expect(child.lines.join('\n').includes('loopback interface only')).toBe(!expectExternal);
      seen[name] = await Promise.all(external.map((address) => accepts(address, port)));
      expect([name, seen[name]]).toEqual([name, external.map(() => expectExternal)]);
    }
    console.log(
      `orchestrator bind, accepted on ${external.join(', ') || '(no other IPv4 interface here)'}: ${JSON.stringify(seen)}`,
    );
  });
});
