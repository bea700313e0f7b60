import { INestApplication, INestMicroservice } from '@nestjs/common';
import { randomBytes } from 'crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'fs';
import { readdir } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import request from 'supertest';
import { parseEnv } from '@loom/agent-kit';
import { newId } from '@loom/session/ids';
import { AGENT as LABOR_LAW } from '../../labor-law-agent/src/agent';
import { createOrchestrator } from '../../orchestrator/src/bootstrap';
import { startEmbeddedAgents } from '../src/embedded-agents';
const { signJwt } = require('../../../scripts/lib/processes');

/** docs/recovery.md: the embedded profile's answers when a file of its data directory is damaged. */
describe('embedded profile: a damaged data file', () => {
  let dataDir: string;
  let app: INestApplication;
  let agents: INestMicroservice[] = [];
  const secret = randomBytes(24).toString('hex');
  const auth = (sub: string, tid = 'acme') => `Bearer ${signJwt({ sub, tid }, secret)}`;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-damaged-'));
    const env = parseEnv({
      LOOM_PROFILE: 'embedded',
      LOOM_DATA_DIR: dataDir,
      LOOM_JWT_SECRET: secret,
      LOG_LEVEL: 'silent',
    });
    agents = await startEmbeddedAgents([LABOR_LAW], env);
    app = await createOrchestrator(env);
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
    await Promise.all(agents.map((a) => a.close()));
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** The directory of session `id`. */
  async function dirOf(id: string): Promise<string> {
    const found = (await readdir(dataDir, { recursive: true })).find((p) => p.endsWith(id));
    if (!found) throw new Error(`no directory for ${id} under ${dataDir}`);
    return join(dataDir, found);
  }

  /** A new conversation of `user` and the directory that holds it. */
  async function conversation(user: string): Promise<{ id: string; dir: string }> {
    const res = await request(app.getHttpServer())
      .post('/v1/conversations')
      .set('authorization', auth(user));
    expect(res.status).toBe(201);
    const id = res.body.conversationId as string;
    return { id, dir: await dirOf(id) };
  }

  it('lets its owner delete a conversation whose conversation.json is damaged, and nobody else', async () => {
    const server = app.getHttpServer();
    const { id, dir } = await conversation('alice');
    writeFileSync(join(dir, 'conversation.json'), '{"conversationId":');
    const get = await request(server)
      .get(`/v1/conversations/${id}`)
      .set('authorization', auth('alice'));
    expect([get.status, get.body.code]).toEqual([500, 'INTERNAL']);
    // Another user of the tenant, and another tenant: as for any conversation not theirs.
    for (const other of [auth('bob'), auth('alice', 'globex')]) {
      const res = await request(server)
        .delete(`/v1/conversations/${id}`)
        .set('authorization', other);
      expect([res.status, res.body.code]).toEqual([404, 'NOT_FOUND']);
    }
    expect(existsSync(dir)).toBe(true);
    const del = await request(server)
      .delete(`/v1/conversations/${id}`)
      .set('authorization', auth('alice'));
    expect(del.status).toBe(204);
    expect(existsSync(dir)).toBe(false);
    const after = await request(server)
      .get(`/v1/conversations/${id}`)
      .set('authorization', auth('alice'));
    expect(after.status).toBe(404);
  });

  it('tells another tenant nothing of a session whose _meta.json is damaged: 404, as for any id', async () => {
    const server = app.getHttpServer();
    const { id, dir } = await conversation('alice');
    const turn = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth('alice'))
      .send({ content: 'My employer fired me without severance pay' });
    expect(turn.status).toBe(201);
    const taskId = turn.body.taskId as string;
    for (const session of [id, taskId])
      writeFileSync(join(await dirOf(session), '_meta.json'), '{"tenantId":');
    const mallory = auth('mallory', 'globex');
    for (const [path, absent] of [
      [`/v1/conversations/${id}`, `/v1/conversations/${newId('c')}`],
      [`/v1/conversations/${id}/messages`, `/v1/conversations/${newId('c')}/messages`],
      [`/v1/tasks/${taskId}`, `/v1/tasks/${newId('t')}`],
    ]) {
      const res = await request(server).get(path).set('authorization', mallory);
      const none = await request(server).get(absent).set('authorization', mallory);
      expect({ path, status: res.status, body: res.body }).toEqual({
        path,
        status: none.status,
        body: none.body,
      });
      expect(res.status).toBe(404);
    }
    const del = await request(server)
      .delete(`/v1/conversations/${id}`)
      .set('authorization', mallory);
    expect(del.status).toBe(404);
    expect(existsSync(join(dir, 'conversation.json'))).toBe(true); // nothing taken over or removed
  });
});
