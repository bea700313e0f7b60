import { mkdtemp, rm, writeFile } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import { newId } from '../ids';
import { FileSessionStore } from '../store/file/file-session.store';
import { ConversationRepository } from './conversation.repository';

/** The embedded profile's listing when one conversation's file is damaged on disk. */
describe('ConversationRepository.list over the file store, one conversation damaged', () => {
  let root = '';
  let store: FileSessionStore;
  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'loom-list-damaged-'));
    store = new FileSessionStore(root);
  });
  afterAll(async () => {
    await store.close();
    await rm(root, { recursive: true, force: true });
  });

  it('lists the others, leaving the damaged one out (the store logs its file)', async () => {
    const repo = new ConversationRepository(store, { idleExpiryDays: 30 });
    const owner = { tenantId: newId('t'), userId: newId('a') };
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await repo.create(owner)).meta.conversationId);
    await writeFile(join(root, ids[1], 'conversation.json'), '{"conversationId":');
    const { items } = await repo.list(owner, { limit: 20 });
    expect(items.map((m) => m.conversationId).sort()).toEqual([ids[0], ids[2]].sort());
  });
});
