import { mkdtempSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';
import { createTestDatabase, PrivateRedisServer } from '@loom/testing';
import { ConversationRepository } from '../conversation/conversation.repository';
import { createSessionInfra, SessionInfra } from '../session.providers';
import { TieredSessionStore } from '../store/tiered/tiered-session.store';
import { LegacyImporter } from './legacy-importer';

/**
 * An import whose Redis stops answering part-way writes MySQL and can neither update nor drop
 * what Redis holds of the conversation; its process then exits, and what it meant to drop with
 * it. The importer must say so (the CLI exits 1), and the next run must leave Redis serving what
 * MySQL holds.
 */
describe('LegacyImporter with Redis lost part-way (real MySQL, private Redis)', () => {
  const alice = { tenantId: 'tenant-a', userId: 'alice' };
  const messages = ['q1', 'a1', 'q2', 'a2'].map((content, i) => ({
    role: i % 2 ? ('assistant' as const) : ('user' as const),
    content,
  }));
  const prefix = 'loom-import-lost:';
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let redis: PrivateRedisServer;
  let dir: string;
  const open = () =>
    createSessionInfra({ mysqlUrl: db.url, redisUrl: redis.url, keyPrefix: prefix });

  beforeAll(async () => {
    db = await createTestDatabase('loom_import_lost');
    redis = await PrivateRedisServer.start();
    dir = mkdtempSync(path.join(tmpdir(), 'loom-import-lost-'));
  });
  afterAll(async () => {
    redis?.resume();
    await redis?.kill();
    await db?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('lists the copies it could not drop, and the next run drops them', async () => {
    const file = path.join(dir, 'lost_session_1.json');
    // An earlier run stopped after two messages; read since, so Redis holds that copy.
    writeFileSync(file, JSON.stringify({ memory: { messages: messages.slice(0, 2) } }));
    const earlier = await open();
    try {
      expect(await new LegacyImporter(earlier.store).importFile(alice, file)).toMatchObject({
        status: 'imported',
      });
      const seen = new ConversationRepository(earlier.store, { idleExpiryDays: 30 });
      expect((await seen.messages(alice, 'lost_session_1')).length).toBe(2);
    } finally {
      await earlier.close();
    }

    // The whole file, by a run whose Redis is stopped (SIGSTOP: it keeps what it holds, answers
    // nothing), from its start on.
    writeFileSync(file, JSON.stringify({ memory: { messages } }));
    redis.pause();
    let leftStale: string[];
    try {
      const first: SessionInfra = await open();
      const store = first.store as TieredSessionStore;
      try {
        expect(await new LegacyImporter(store).importFile(alice, file)).toMatchObject({
          status: 'resumed',
          messages: 2,
        });
        leftStale = await store.dropMissedHotCopies();
      } finally {
        // The process exits: what it meant to drop in Redis goes with it.
        await first.close();
      }
    } finally {
      redis.resume();
    }
    expect(leftStale).toEqual(['lost_session_1']);

    // The next run, Redis answering.
    const second = await open();
    try {
      const rerun = await new LegacyImporter(second.store).importFile(alice, file);
      expect(rerun).toMatchObject({ status: 'unchanged', messages: 0 });
      expect(await (second.store as TieredSessionStore).dropMissedHotCopies()).toEqual([]);
    } finally {
      await second.close();
    }

    // Another app of the deployment, reading through Redis.
    const reader = await open();
    try {
      const again = new ConversationRepository(reader.store, { idleExpiryDays: 30 });
      expect((await again.messages(alice, 'lost_session_1')).map((m) => m.content)).toEqual(
        messages.map((m) => m.content),
      );
      expect((await again.get(alice, 'lost_session_1')).messageCount).toBe(4);
    } finally {
      await reader.close();
    }
  });
});
