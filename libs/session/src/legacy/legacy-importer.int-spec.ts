import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';
import { createTestDatabase } from '@loom/testing';
import { ConversationRepository } from '../conversation/conversation.repository';
import { openSessionDataSource } from '../store/mysql/data-source';
import { MysqlSessionStore } from '../store/mysql/mysql-session.store';
import { MAX_LEGACY_MESSAGE_CHARS } from './legacy-document';
import { LegacyImporter } from './legacy-importer';

describe('LegacyImporter (real MySQL)', () => {
  let store: MysqlSessionStore;
  let drop: () => Promise<void>;
  let dir: string;
  const alice = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    const db = await createTestDatabase();
    drop = db.drop;
    store = new MysqlSessionStore(await openSessionDataSource({ url: db.url }));
    dir = mkdtempSync(path.join(tmpdir(), 'loom-legacy-'));
  });
  afterAll(async () => {
    await store.close();
    await drop();
    rmSync(dir, { recursive: true, force: true });
  });

  const write = (name: string, doc: unknown) => {
    const file = path.join(dir, name);
    writeFileSync(file, typeof doc === 'string' ? doc : JSON.stringify(doc));
    return file;
  };

  it('imports one row per message with contiguous seqs, and a re-run adds nothing', async () => {
    const messages = Array.from({ length: 5 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: `m${i + 1}`,
    }));
    const file = write('user_session_001.json', { agent: { iteration: 5 }, memory: { messages } });
    const importer = new LegacyImporter(store);
    expect(await importer.importFile(alice, file)).toMatchObject({
      status: 'imported',
      messages: 5,
    });
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    const stored = await conversations.messages(alice, 'user_session_001');
    expect(stored.map((m) => [m.seq, m.role, m.content])).toEqual(
      messages.map((m, i) => [i + 1, m.role, m.content]),
    );
    expect(await store.get(alice, 'user_session_001', 'legacy:agent')).toEqual({ iteration: 5 });
    expect((await conversations.get(alice, 'user_session_001')).messageCount).toBe(5);
    expect(await importer.importFile(alice, file)).toMatchObject({
      status: 'unchanged',
      messages: 0,
    });
    expect(await conversations.messageCount(alice, 'user_session_001')).toBe(5);
  });

  it('a re-run leaves the count of a conversation that went on after its import', async () => {
    const messages = [
      { role: 'user', content: 'q1' },
      { role: 'assistant', content: 'a1' },
    ];
    const file = write('user_session_002.json', { memory: { messages } });
    const importer = new LegacyImporter(store);
    await importer.importFile(alice, file);
    // The user went on with the imported conversation: a turn added two messages.
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    for (const [role, content] of [
      ['user', 'q2'],
      ['assistant', 'a2'],
    ] as const)
      await conversations.appendMessage(alice, 'user_session_002', {
        role,
        content,
        agentType: null,
        taskId: null,
        createdAt: new Date().toISOString(),
        tokens: 0,
      });
    const meta = await conversations.get(alice, 'user_session_002');
    meta.messageCount = 4;
    await conversations.save(alice, meta);
    expect(await importer.importFile(alice, file)).toMatchObject({
      status: 'unchanged',
      messages: 0,
    });
    expect((await conversations.get(alice, 'user_session_002')).messageCount).toBe(4);
    expect(await conversations.messageCount(alice, 'user_session_002')).toBe(4);
  });

  it('never merges two different files of one id: the second is skipped, the first kept whole', async () => {
    const importer = new LegacyImporter(store);
    const first = [
      { role: 'user', content: 'A1' },
      { role: 'assistant', content: 'A2' },
    ];
    const second = [
      { role: 'user', content: 'B1' },
      { role: 'assistant', content: 'B2' },
      { role: 'user', content: 'B3' },
    ];
    mkdirSync(path.join(dir, 'one'));
    mkdirSync(path.join(dir, 'two'));
    await importer.importFile(
      alice,
      write('one/dup_session_1.json', { memory: { messages: first } }),
    );
    expect(
      await importer.importFile(
        alice,
        write('two/dup_session_1.json', { memory: { messages: second } }),
      ),
    ).toMatchObject({ status: 'skipped', messages: 0 });
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    const stored = await conversations.messages(alice, 'dup_session_1');
    expect(stored.map((m) => m.content)).toEqual(['A1', 'A2']);
  });

  it('refuses a file that is not UTF-8 instead of importing mangled text, and reads a BOM', async () => {
    const importer = new LegacyImporter(store);
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    // "你好" in GBK, as an export from an older Chinese Windows tool writes it.
    const gbk = Buffer.concat([
      Buffer.from('{"memory":{"messages":[{"role":"user","content":"'),
      Buffer.from([0xc4, 0xe3, 0xba, 0xc3]),
      Buffer.from('"}]}}'),
    ]);
    const gbkFile = path.join(dir, 'gbk_session_1.json');
    writeFileSync(gbkFile, gbk);
    expect(await importer.importFile(alice, gbkFile)).toMatchObject({
      status: 'skipped',
      reason: expect.stringContaining('UTF-8'),
    });
    expect(await store.exists({ tenantId: alice.tenantId }, 'gbk_session_1')).toBe(false);

    const doc = JSON.stringify({ memory: { messages: [{ role: 'user', content: '你好' }] } });
    const bomFile = path.join(dir, 'bom_session_1.json');
    writeFileSync(bomFile, Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(doc)]));
    expect(await importer.importFile(alice, bomFile)).toMatchObject({ status: 'imported' });
    const stored = await conversations.messages(alice, 'bom_session_1');
    expect(stored.map((m) => m.content)).toEqual(['你好']);
  });

  it('refuses a file with a message too large to store before writing any of it', async () => {
    const importer = new LegacyImporter(store);
    const messages = [
      { role: 'user', content: 'small' },
      { role: 'assistant', content: 'x'.repeat(MAX_LEGACY_MESSAGE_CHARS + 1) },
      { role: 'user', content: 'after' },
    ];
    expect(
      await importer.importFile(alice, write('huge_session_1.json', { memory: { messages } })),
    ).toMatchObject({
      status: 'skipped',
      messages: 0,
      reason: expect.stringContaining('message 2'),
    });
    expect(await store.exists({ tenantId: alice.tenantId }, 'huge_session_1')).toBe(false);
  });

  it('keeps what it cannot import as messages or values, so no part of the file is lost', async () => {
    const importer = new LegacyImporter(store);
    const system = { role: 'system', content: 'You are a lawyer.' };
    const image = { role: 'user', content: [{ type: 'image', url: 'contract.png' }] };
    const doc = {
      'agent config': { temperature: 0.2 },
      agent: { name: 'Assistant' },
      memory: {
        summary: 'earlier: a labor dispute',
        messages: [
          system,
          { role: 'user', content: 'q' },
          image,
          { role: 'assistant', content: 'a' },
        ],
      },
    };
    expect(await importer.importFile(alice, write('rest_session_1.json', doc))).toMatchObject({
      status: 'imported',
      messages: 2,
    });
    const scope = { tenantId: alice.tenantId };
    expect(await store.get(scope, 'rest_session_1', 'legacy:agent')).toEqual({ name: 'Assistant' });
    expect(await store.get(scope, 'rest_session_1', 'legacy:memory')).toEqual({
      summary: 'earlier: a labor dispute',
    });
    expect(await store.get(scope, 'rest_session_1', 'legacy:unimported')).toEqual({
      messages: [
        { index: 0, message: system },
        { index: 2, message: image },
      ],
      state: { 'agent config': { temperature: 0.2 } },
    });
  });

  it('refuses a tenant of Loom’s own (starting with _), as API tokens do', async () => {
    const importer = new LegacyImporter(store);
    const file = write('c_reserved00001.json', { memory: { messages: [] } });
    await expect(
      importer.importFile({ tenantId: '_system', userId: 'ops' }, file),
    ).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    expect(await store.get({ tenantId: '_system' }, 'c_reserved00001', 'conversation')).toBeNull();
  });

  it('skips bad ids and bad documents, and never writes into another owner’s conversation', async () => {
    const importer = new LegacyImporter(store);
    expect(
      await importer.importFile(alice, write('..bad.json', { memory: { messages: [] } })),
    ).toMatchObject({ status: 'skipped' });
    expect(await importer.importFile(alice, write('broken_session.json', '{ nope'))).toMatchObject({
      status: 'skipped',
      reason: 'not valid JSON',
    });
    const theirs = write('shared_session_9.json', {
      memory: { messages: [{ role: 'user', content: 'x' }] },
    });
    await importer.importFile(alice, theirs);
    const bob = { tenantId: 'tenant-b', userId: 'bob' };
    expect(await importer.importFile(bob, theirs)).toMatchObject({
      status: 'skipped',
      reason: 'the id belongs to another owner',
    });
    expect(
      (await store.listSessions({ tenantId: 'tenant-b' }, 'conversation', { limit: 10 })).length,
    ).toBe(0);
  });

  it('a run stopped part-way leaves the count of the messages it did write', async () => {
    const messages = Array.from({ length: 4 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: `s${i + 1}`,
    }));
    const file = write('stopped_session_1.json', { memory: { messages } });
    // The connection is lost at the third message: the run stops there, as at Ctrl-C.
    let appends = 0;
    const failing = new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (name !== 'append') return typeof value === 'function' ? value.bind(target) : value;
        return (...args: Parameters<MysqlSessionStore['append']>) => {
          if (++appends === 3) return Promise.reject(new Error('connection lost'));
          return target.append(...args);
        };
      },
    });
    await expect(new LegacyImporter(failing).importFile(alice, file)).rejects.toThrow(
      'connection lost',
    );
    const conversations = new ConversationRepository(store, { idleExpiryDays: 30 });
    expect(await conversations.messageCount(alice, 'stopped_session_1', true)).toBe(2);
    expect((await conversations.get(alice, 'stopped_session_1', true)).messageCount).toBe(2);
  });

  it('writes nothing for an id of another owner: no conversation under a fresh id, even for a moment', async () => {
    const theirs = write('shared_session_10.json', {
      memory: { messages: [{ role: 'user', content: 'x' }] },
    });
    await new LegacyImporter(store).importFile(alice, theirs);
    // Every write the importer asks of the store: a run stopped (Ctrl-C) between creating a
    // conversation and deleting it again would leave that conversation behind, empty.
    const writes: string[] = [];
    const recording = new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          if (['save', 'create', 'append', 'delete', 'deleteKey'].includes(String(name)))
            writes.push(`${String(name)} ${String(args[1])}`);
          return value.apply(target, args);
        };
      },
    });
    const bob = { tenantId: 'tenant-a', userId: 'bob' };
    expect(await new LegacyImporter(recording).importFile(bob, theirs)).toMatchObject({
      status: 'skipped',
      reason: 'the id belongs to another owner',
    });
    expect(writes).toEqual([]);
  });
});
