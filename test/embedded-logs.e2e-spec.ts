import { randomBytes } from 'crypto';
import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { AppProcess, client, startEmbeddedApp } from './system';
const { stopAll, waitFor, signJwt } = require('../scripts/lib/processes');

type Line = Record<string, unknown>;

/**
 * The embedded profile runs every app in one process, so every class's Nest `Logger` writes
 * through the one logger installed last (the orchestrator's). Each line must still name the
 * service that wrote it: an agent's lines its agent, the orchestrator's the orchestrator.
 */
describe('system: log lines of the embedded profile name their service', () => {
  const secret = randomBytes(24).toString('hex');
  let dataDir: string;
  let child: AppProcess | undefined;

  beforeAll(() => (dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-logs-'))));
  afterAll(async () => {
    if (child) await stopAll([child]);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("writes an agent's execution lines as that agent, and the access log as the orchestrator", async () => {
    const started = await startEmbeddedApp('embedded', dataDir, {
      LOOM_JWT_SECRET: secret,
      LOG_LEVEL: 'info',
    });
    child = started.child;
    const api = client(started.base, signJwt({ sub: 'alice', tid: 'tenant-l' }, secret));
    await waitFor(async () => (await fetch(`${started.base}/health`)).status === 200, {
      what: 'the embedded orchestrator',
      timeoutMs: 60_000,
    });
    await waitFor(async () => (await api('GET', '/v1/agents')).body?.items?.length >= 3, {
      what: 'three agents in the embedded process',
      timeoutMs: 30_000,
    });
    const id = (await api('POST', '/v1/conversations', {})).body.conversationId;
    const correlationId = `embedded-${randomBytes(6).toString('hex')}`;
    const turn = await api(
      'POST',
      `/v1/conversations/${id}/messages`,
      { content: '我跟公司签的劳动合同有问题' },
      { 'x-correlation-id': correlationId },
    );
    expect(turn.status).toBe(201);
    expect(turn.headers.get('x-correlation-id')).toBe(correlationId);

    const lines = child.lines
      .map((l): Line | null => {
        try {
          return JSON.parse(l) as Line;
        } catch {
          return null;
        }
      })
      .filter((l): l is Line => l !== null);
    const executing = lines.filter(
      (l) => l.context === 'AgentRunner' && String(l.msg).startsWith('executing with'),
    );
    // legal-research and labor-law both ran this turn, each in its own agent.
    expect(executing.map((l) => [l.agentType, l.service]).sort()).toEqual([
      ['labor-law', 'labor-law-agent'],
      ['legal-research', 'legal-research-agent'],
    ]);
    // Through the TCP transport too, every line of the turn (the orchestrator's and each
    // agent's) carries the turn's correlation id.
    const ofTurn = lines.filter((l) => l.taskId === turn.body.taskId);
    expect(ofTurn.filter((l) => l.service !== 'orchestrator').length).toBeGreaterThan(1);
    for (const line of [...ofTurn, ...executing]) expect(line).toMatchObject({ correlationId });
    const access = lines.filter((l) => l.msg === 'request completed');
    expect(access.length).toBeGreaterThan(0);
    expect(new Set(access.map((l) => l.service))).toEqual(new Set(['orchestrator']));
    // Every line names one service, once (no duplicate key in the JSON text).
    for (const raw of child.lines.filter((l) => l.startsWith('{')))
      expect(raw.match(/"service":/g)).toHaveLength(1);
  });
});
