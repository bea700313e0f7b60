import { INestApplication, INestMicroservice } from '@nestjs/common';
import { randomBytes } from 'crypto';
import { mkdtempSync, rmSync } from 'fs';
import { Server, Socket } from 'net';
import { tmpdir } from 'os';
import { join } from 'path';
import { Writable } from 'stream';
import request from 'supertest';
import { parseEnv } from '@loom/agent-kit';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { AGENT as LABOR_LAW } from '../../labor-law-agent/src/agent';
import { createOrchestrator } from '../../orchestrator/src/bootstrap';
import { startEmbeddedAgents } from '../src/embedded-agents';
const { signJwt } = require('../../../scripts/lib/processes');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The embedded profile talks to its agents over Nest's TCP transport, one client per agent type,
 * opened at the first turn that needs it. What happens on that connection later (it is reset, it
 * fails) is no turn's: its log line must not carry the ids of whichever turn happened to open it,
 * as the Redis Streams client's connection events carry none (it connects at start).
 */
describe('embedded profile: the agent connection logs outside any turn (in-process)', () => {
  let dataDir: string;
  let agents: INestMicroservice[] = [];
  let app: INestApplication | undefined;
  let out = '';
  const lines = () =>
    out
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  beforeAll(() => (dataDir = mkdtempSync(join(tmpdir(), 'loom-tcp-logctx-'))));
  afterAll(async () => {
    await app?.close();
    await Promise.all(agents.map((a) => a.close()));
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("a reset of the agent's connection is not logged as the turn that opened it", async () => {
    const secret = randomBytes(24).toString('hex');
    const env = parseEnv({
      LOOM_PROFILE: 'embedded',
      LOOM_DATA_DIR: dataDir,
      LOOM_JWT_SECRET: secret,
      AGENT_PORT: '0',
      LOG_LEVEL: 'info',
    });
    agents = await startEmbeddedAgents([LABOR_LAW], env);
    const accepted: Socket[] = [];
    agents[0].unwrap<Server>().on('connection', (s: Socket) => accepted.push(s));
    app = await createOrchestrator(env);
    await app.init();
    app.useLogger(
      new LoomLogger(
        createPinoLogger({
          service: 'orchestrator',
          level: 'info',
          format: 'json',
          destination: new Writable({
            write(chunk, _enc, done) {
              out += chunk.toString();
              done();
            },
          }),
        }),
      ),
    );
    const auth = `Bearer ${signJwt({ sub: 'alice', tid: 'tenant-tcp' }, secret)}`;
    const server = app.getHttpServer();
    const conv = await request(server)
      .post('/v1/conversations')
      .set('authorization', auth)
      .send({});
    const correlationId = `opened-${randomBytes(6).toString('hex')}`;
    const turn = await request(server)
      .post(`/v1/conversations/${conv.body.conversationId}/messages`)
      .set('authorization', auth)
      .set('x-correlation-id', correlationId)
      .send({ content: '我跟公司签的劳动合同有问题，公司不给加班费' });
    expect(turn.status).toBe(201);
    expect(turn.body.agents).toContain('labor-law');
    expect(lines().some((l) => l.correlationId === correlationId)).toBe(true);

    // The agent's side resets the connection: the client's socket fails with ECONNRESET.
    expect(accepted.length).toBeGreaterThan(0);
    for (const socket of accepted) socket.resetAndDestroy();
    const until = Date.now() + 10_000;
    while (!lines().some((l) => l.context === 'ClientTCP')) {
      if (Date.now() > until) throw new Error('the reset was never logged');
      await sleep(20);
    }
    const line = lines().find((l) => l.context === 'ClientTCP')!;
    expect(line).toMatchObject({ level: 'error', service: 'orchestrator' });
    expect(line).not.toHaveProperty('correlationId');
    expect(line).not.toHaveProperty('taskId');
    expect(line).not.toHaveProperty('tenantId');
  });
});
