import { INestApplication } from '@nestjs/common';
import { randomBytes } from 'crypto';
import request from 'supertest';
import { LoomEnv, parseEnv } from '@loom/agent-kit';
import { ConversationRepository, SESSION_INFRA, SessionInfra } from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { createOrchestrator } from '../src/bootstrap';
const { signJwt } = require('../../../scripts/lib/processes');

/** Paging through GET /v1/conversations while the user deletes one (in-process, real stores). */
describe('listing conversations (in-process, real stores)', () => {
  let app: INestApplication;
  let env: LoomEnv;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase('loom_list');
    const prefix = createTestPrefix('loomlist');
    env = parseEnv({
      REDIS_URL: TEST_REDIS_URL,
      MYSQL_URL: db.url,
      LOOM_KEY_PREFIX: prefix.prefix,
      LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'warn',
    });
    app = await createOrchestrator(env);
    await app.init();
    cleanup = async () => {
      await app.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    };
  });
  afterAll(() => cleanup?.());

  it('a conversation deleted while a page is read leaves that page short, not the listing cut off', async () => {
    const owner = { tenantId: 'acme', userId: 'alice' };
    const auth = `Bearer ${signJwt({ sub: 'alice', tid: 'acme' }, env.LOOM_JWT_SECRET)}`;
    const conversations = app.get(ConversationRepository, { strict: false });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      ids.push((await conversations.create(owner)).meta.conversationId);
      await new Promise((r) => setTimeout(r, 5)); // distinct update times: newest first
    }
    const newestFirst = [...ids].reverse();
    // The user deletes the second newest (in another tab) after the page's rows were listed.
    const store = app.get<SessionInfra>(SESSION_INFRA, { strict: false }).store;
    const listed = store.listSessions.bind(store);
    const spy = jest.spyOn(store, 'listSessions').mockImplementationOnce(async (...args) => {
      const rows = await listed(...args);
      await conversations.delete(owner, newestFirst[1]);
      return rows;
    });
    const first = await request(app.getHttpServer())
      .get('/v1/conversations?limit=2')
      .set('authorization', auth);
    spy.mockRestore();
    expect(first.status).toBe(200);
    expect(first.body.items.map((c: { conversationId: string }) => c.conversationId)).toEqual([
      newestFirst[0],
    ]);
    expect(first.body.nextCursor).not.toBeNull();
    const second = await request(app.getHttpServer())
      .get(`/v1/conversations?limit=2&cursor=${first.body.nextCursor}`)
      .set('authorization', auth);
    expect(second.status).toBe(200);
    expect(second.body.items.map((c: { conversationId: string }) => c.conversationId)).toEqual(
      newestFirst.slice(2),
    );
    expect(second.body.nextCursor).not.toBeNull();
    const third = await request(app.getHttpServer())
      .get(`/v1/conversations?limit=2&cursor=${second.body.nextCursor}`)
      .set('authorization', auth);
    expect(third.body).toEqual({ items: [], nextCursor: null });
  });
});
