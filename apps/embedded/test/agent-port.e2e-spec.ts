import { INestMicroservice } from '@nestjs/common';
import { mkdtempSync, rmSync } from 'fs';
import { connect, createServer } from 'net';
import { tmpdir } from 'os';
import { join } from 'path';
import { parseEnv } from '@loom/agent-kit';
import { AGENT as CONTRACT_LAW } from '../../contract-law-agent/src/agent';
import { AGENT as LABOR_LAW } from '../../labor-law-agent/src/agent';
import { startEmbeddedAgents } from '../src/embedded-agents';

/** Two free ports in a row on the loopback interface, the first of them. */
async function freePair(): Promise<number> {
  const listen = (port: number) =>
    new Promise<ReturnType<typeof createServer> | null>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(null));
      srv.listen(port, '127.0.0.1', () => resolve(srv));
    });
  const close = (srv: ReturnType<typeof createServer>) =>
    new Promise<void>((resolve) => srv.close(() => resolve()));
  for (;;) {
    const first = await listen(0);
    if (!first) continue;
    const port = (first.address() as { port: number }).port;
    const second = port < 65535 ? await listen(port + 1) : null;
    await close(first);
    if (second) {
      await close(second);
      return port;
    }
  }
}

// docs/configuration.md: AGENT_PORT is the embedded profile's agent TCP port. That profile hosts
// every agent in one process, so one port cannot be each agent's: they take AGENT_PORT and the
// ports after it, in the order they start.
describe('embedded profile: AGENT_PORT', () => {
  let dataDir: string;
  let agents: INestMicroservice[] = [];

  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-agent-port-'));
  });
  afterEach(async () => {
    await Promise.all(agents.map((a) => a.close()));
    agents = [];
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('starts every agent, the first on AGENT_PORT and the next on the port after it', async () => {
    const port = await freePair();
    const env = parseEnv({
      LOOM_PROFILE: 'embedded',
      LOOM_DATA_DIR: dataDir,
      AGENT_PORT: String(port),
      LOG_LEVEL: 'silent',
    });
    agents = await startEmbeddedAgents([CONTRACT_LAW, LABOR_LAW], env);
    const listening = (p: number) =>
      new Promise<boolean>((resolve) => {
        const socket = connect(p, '127.0.0.1', () => resolve(!!socket.end()));
        socket.once('error', () => resolve(false));
      });
    expect(agents).toHaveLength(2);
    expect([await listening(port), await listening(port + 1)]).toEqual([true, true]);
  });

  it('gives each agent a free port of its own when AGENT_PORT is 0', async () => {
    const env = parseEnv({ LOOM_PROFILE: 'embedded', LOOM_DATA_DIR: dataDir, LOG_LEVEL: 'silent' });
    agents = await startEmbeddedAgents([CONTRACT_LAW, LABOR_LAW], env);
    expect(agents).toHaveLength(2);
  });
});
