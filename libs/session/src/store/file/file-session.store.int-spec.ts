import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'fs';
import fsp, { FileHandle, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import { LoomErrorCode } from '../../errors/session-error';
import { isValidId, newId } from '../../ids';
import { runFenceLapseTests, runSessionStoreContract } from '../session-store.contract';
import { FileSessionStore } from './file-session.store';
import { forgetLists } from './list-file';
import { readAllMetas, readMeta } from './session-files';

const SESSION_FILE = /^(_meta\.json|[A-Za-z0-9_.:-]+\.jsonl?)$/;

/** Every path under `root`, relative, directories ending in '/'. */
async function tree(root: string): Promise<string[]> {
  const entries = await readdir(root, { recursive: true, withFileTypes: true });
  return entries
    .map(
      (e) =>
        join(e.parentPath ?? e.path, e.name).slice(root.length + 1) + (e.isDirectory() ? '/' : ''),
    )
    .sort();
}

/** Fails unless `parent` holds only `base/`, and base only session directories of session files. */
async function expectOnlyLegitSessions(parent: string): Promise<void> {
  const strays = (await tree(parent)).filter((path) => {
    const parts = path.split('/').filter(Boolean);
    if (parts[0] !== 'base') return true;
    if (parts.length === 1) return false;
    if (!isValidId(parts[1])) return true;
    if (parts.length === 2) return !path.endsWith('/');
    return parts.length !== 3 || path.endsWith('/') || !SESSION_FILE.test(parts[2]);
  });
  expect(strays).toEqual([]);
}

/** Whether the temporary directory's file system tells `a` from `A` (Linux: yes; macOS: no). */
function caseSensitiveFs(): boolean {
  const dir = mkdtempSync(join(tmpdir(), 'loom-case-'));
  try {
    writeFileSync(join(dir, 'a'), '');
    return !existsSync(join(dir, 'A'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// The contract's own directory: made by its factory and, once it ran, checked for strays (invalid
// ids included) and removed by its cleanup. Nothing here runs when `-t` leaves the contract out.
runSessionStoreContract(
  'file',
  async () => {
    const parent = await mkdtemp(join(tmpdir(), 'loom-file-store-'));
    const store = new FileSessionStore(join(parent, 'base'));
    const cleanup = async (): Promise<void> => {
      await store.close();
      try {
        await expectOnlyLegitSessions(parent);
        const dirs = (await tree(join(parent, 'base'))).filter((p) => p.endsWith('/'));
        expect(dirs.length).toBeGreaterThan(10);
      } finally {
        await rm(parent, { recursive: true, force: true });
      }
    };
    return { store, cleanup };
  },
  { caseSensitive: caseSensitiveFs() },
);

runFenceLapseTests('file', async (now) => {
  const root = await mkdtemp(join(tmpdir(), 'loom-file-lapse-'));
  const store = new FileSessionStore(root, { now });
  return {
    store,
    cleanup: async () => {
      await store.close();
      await rm(root, { recursive: true, force: true });
    },
  };
});

describe('FileSessionStore on disk', () => {
  const scope = { tenantId: newId('t') };
  // A directory of its own, made here: not the contract's, which `-t` may leave unmade.
  let parent = '';
  const base = (): string => join(parent, 'base');
  beforeAll(async () => {
    parent = await mkdtemp(join(tmpdir(), 'loom-file-disk-'));
  });
  afterAll(() => rm(parent, { recursive: true, force: true }));

  it('works in a temporary directory of its own, whichever tests run (never the current folder)', () => {
    expect(base().startsWith(join(tmpdir(), 'loom-'))).toBe(true);
  });

  it('writes nothing anywhere for path-traversal ids and keys', async () => {
    const store = new FileSessionStore(base());
    const before = await tree(parent);
    const sid = newId('c');
    const invalid = { code: LoomErrorCode.INVALID_ID };
    for (const bad of ['../x', '..', 'a/b', '/tmp/x', 'x\u0000y', `../${newId('c')}`]) {
      await expect(store.save(scope, bad, 'state', 1)).rejects.toMatchObject(invalid);
      await expect(store.nextFence(scope, bad)).rejects.toMatchObject(invalid);
      await expect(store.append(scope, sid, bad, 1)).rejects.toMatchObject(invalid);
      await expect(store.save(scope, sid, bad, 1)).rejects.toMatchObject(invalid);
    }
    for (const bad of ['../x', 'a/b', 'x\u0000y']) {
      await expect(store.nextFence({ tenantId: bad }, sid)).rejects.toMatchObject(invalid);
    }
    await expect(store.save(scope, sid, '_meta', 1)).rejects.toMatchObject(invalid);
    expect(await tree(parent)).toEqual(before);
  });

  it('a deletion leaves nothing of the session on disk, and its counter still fences out a paused holder', async () => {
    const store = new FileSessionStore(base());
    const sid = newId('c');
    const paused = await store.nextFence(scope, sid);
    await store.save(scope, sid, 'plan', 1, { fence: paused });
    await store.append(scope, sid, 'log', 'x');
    await store.nextFence(scope, sid); // the DELETE's own lock
    await store.delete(scope, sid);
    expect(await readdir(base())).not.toContain(sid);
    // The counter lives on in this process (no holder outlives it): the id locked again goes on.
    const again = await store.nextFence(scope, sid);
    expect(again).toBe(3);
    await expect(store.save(scope, sid, 'plan', 'late', { fence: paused })).rejects.toMatchObject({
      code: LoomErrorCode.STALE_FENCING_TOKEN,
    });
    expect(await readdir(base())).not.toContain(sid);
    await store.save(scope, sid, 'plan', 'again', { fence: again });
    expect(await readMeta(join(base(), sid))).toMatchObject({ fence: 3 });
  });

  it('a fence issued where the session holds nothing writes nothing to disk', async () => {
    const store = new FileSessionStore(base());
    const sid = newId('c');
    await store.nextFence(scope, sid); // a turn that waited for a conversation deleted meanwhile
    expect(await readdir(base())).not.toContain(sid);
    await expect(store.nextFence({ tenantId: newId('t') }, sid)).rejects.toMatchObject({
      code: LoomErrorCode.NOT_FOUND,
    });
  });

  it('a deletion of a session never fenced removes its directory: nothing is left to lapse', async () => {
    const store = new FileSessionStore(base());
    const sid = newId('c');
    await store.save(scope, sid, 'plan', 1);
    await store.delete(scope, sid);
    expect(await readdir(base())).not.toContain(sid);
  });

  it('lays a session out as {key}.json, {key}.jsonl and _meta.json', async () => {
    const store = new FileSessionStore(base());
    const sid = newId('c');
    const userId = newId('a');
    await store.save(scope, sid, 'plan', { step: '一' }, { userId });
    await store.append(scope, sid, 'memory:messages', 'hi');
    await store.append(scope, sid, 'memory:messages', { text: '你好' });
    const dir = join(base(), sid);
    expect((await readdir(dir)).sort()).toEqual([
      '_meta.json',
      'memory:messages.jsonl',
      'plan.json',
    ]);
    expect(JSON.parse(await readFile(join(dir, 'plan.json'), 'utf8'))).toEqual({ step: '一' });
    expect(await readFile(join(dir, 'memory:messages.jsonl'), 'utf8')).toBe(
      '{"index":1,"value":"hi"}\n{"index":2,"value":{"text":"你好"}}\n',
    );
    const meta = JSON.parse(await readFile(join(dir, '_meta.json'), 'utf8'));
    expect(meta).toEqual({
      tenantId: scope.tenantId,
      fence: 0,
      values: { plan: { updatedAt: expect.any(String), userId } },
      lists: ['memory:messages'],
    });
    expect((await stat(join(dir, 'plan.json'))).mode & 0o077).toBe(0);
  });

  it('ignores a torn last line and appends after the last whole one', async () => {
    const store = new FileSessionStore(base());
    const sid = newId('c');
    await store.save(scope, sid, 'state', 1);
    const file = join(base(), sid, 'log.jsonl');
    await writeFile(file, '{"index":1,"value":"a"}\n{"index":2,"value":"b"}\n{"index":3,"val');
    expect(await store.getList(scope, sid, 'log')).toEqual([
      { index: 1, value: 'a' },
      { index: 2, value: 'b' },
    ]);
    expect(await store.listLength(scope, sid, 'log')).toBe(2);
    expect(await store.append(scope, sid, 'log', 'c')).toBe(3);
    expect((await store.getList(scope, sid, 'log')).map((i) => i.value)).toEqual(['a', 'b', 'c']);
    expect((await readFile(file, 'utf8')).split('\n')).toHaveLength(4);
  });

  it('lists many sessions reading at most 16 metas at once (no EMFILE)', async () => {
    const root = await mkdtemp(join(tmpdir(), 'loom-file-list-'));
    try {
      const store = new FileSessionStore(root);
      const sids = Array.from({ length: 300 }, () => newId('c'));
      for (const sid of sids) await store.save(scope, sid, 'conversation', { sid });
      expect(
        (await store.listSessions(scope, 'conversation', { limit: 1000 }))
          .map((s) => s.sessionId)
          .sort(),
      ).toEqual([...sids].sort());
      // What listSessions reads them with, counting the reads in flight.
      let open = 0;
      let most = 0;
      const metas = await readAllMetas(root, async (dir) => {
        most = Math.max(most, ++open);
        try {
          return await readMeta(dir);
        } finally {
          open--;
        }
      });
      expect(metas.map((m) => m.sessionId).sort()).toEqual([...sids].sort());
      expect(most).toBe(16);
      await store.close();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('shares one write chain between two stores on the same directory', async () => {
    const [one, two] = [new FileSessionStore(base()), new FileSessionStore(`${base()}/`)];
    const sid = newId('c');
    const indexes = await Promise.all(
      Array.from({ length: 20 }, (_, n) => (n % 2 ? one : two).append(scope, sid, 'log', n)),
    );
    expect([...indexes].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, n) => n + 1));
    await Promise.all([one.close(), two.close()]);
  });
});

describe('FileSessionStore with a damaged file', () => {
  const scope = { tenantId: newId('t') };
  let root = '';
  let store: FileSessionStore;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'loom-file-damaged-'));
    store = new FileSessionStore(root);
  });
  afterEach(async () => {
    await store.close();
    await rm(root, { recursive: true, force: true });
  });

  it('answers INTERNAL naming the list and line when a line before the last is damaged', async () => {
    const sid = newId('c');
    for (const value of ['a', 'b', 'c']) await store.append(scope, sid, 'log', value);
    const file = join(root, sid, 'log.jsonl');
    const lines = (await readFile(file, 'utf8')).split('\n');
    lines[1] = '{"index":2,"val\u0000\u0000'; // a damaged block, the lines around it whole
    await writeFile(file, lines.join('\n'));
    const damaged = {
      code: LoomErrorCode.INTERNAL,
      details: { damaged: `${sid}/log.jsonl line 2 (not a list item)` },
    };
    await expect(store.getList(scope, sid, 'log')).rejects.toMatchObject(damaged);
    await expect(store.listLength(scope, sid, 'log')).rejects.toMatchObject(damaged);
    // Nothing is written on top of it either, once the last index is read again (a restart).
    forgetLists(file);
    await expect(store.append(scope, sid, 'log', 'd')).rejects.toMatchObject(damaged);
    expect((await readFile(file, 'utf8')).split('\n')).toEqual(lines);
  });

  it('answers INTERNAL naming a damaged value file to its owner, and nothing to another tenant', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'conversation', { title: 'a' });
    await writeFile(join(root, sid, 'conversation.json'), '{"title":');
    await expect(store.get(scope, sid, 'conversation')).rejects.toMatchObject({
      code: LoomErrorCode.INTERNAL,
      message: expect.stringContaining('damaged'),
      details: { damaged: `${sid}/conversation.json (not JSON)` },
    });
    expect(await store.get({ tenantId: newId('t') }, sid, 'conversation')).toBeNull();
  });

  it("takes a session whose _meta.json is damaged as nobody's: absent to every tenant, never overwritten", async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'conversation', { title: 'b' });
    await store.append(scope, sid, 'log', 'x');
    const meta = join(root, sid, '_meta.json');
    await writeFile(meta, '{"tenantId":');
    // Its owner cannot be read: every tenant is told what it is told of another tenant's session.
    for (const asking of [scope, { tenantId: newId('t') }]) {
      expect(await store.get(asking, sid, 'conversation')).toBeNull();
      expect(await store.getList(asking, sid, 'log')).toEqual([]);
      expect(await store.listLength(asking, sid, 'log')).toBe(0);
      expect(await store.listSessionKeys(asking, sid)).toEqual([]);
      expect(await store.exists(asking, sid)).toBe(false);
      for (const write of [
        () => store.save(asking, sid, 'conversation', { title: 'mine' }),
        () => store.append(asking, sid, 'log', 'y'),
        () => store.nextFence(asking, sid),
      ]) {
        await expect(write()).rejects.toMatchObject({ code: LoomErrorCode.NOT_FOUND });
      }
      expect(await store.create(asking, sid, 'conversation', { title: 'mine' })).toBe(false);
      await store.delete(asking, sid);
    }
    expect(await readFile(meta, 'utf8')).toBe('{"tenantId":'); // left for an operator to restore
    expect(await readFile(join(root, sid, 'conversation.json'), 'utf8')).toBe('{"title":"b"}');
    expect(await store.listSessions(scope, 'conversation', { limit: 10 })).toEqual([]);
  });
});

/**
 * What the store asks the kernel to make durable before it answers, observed at the fs boundary
 * (`open` and FileHandle's sync calls). It proves the calls are made, on which file or directory,
 * before the write is acknowledged; not that the disk honours them (no power is cut here).
 */
describe('FileSessionStore durability', () => {
  const scope = { tenantId: newId('t') };
  let root = '';
  let store: FileSessionStore;
  /** `sync <path>` / `datasync <path>`, in call order. */
  let syncs: string[] = [];
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'loom-file-sync-'));
    store = new FileSessionStore(root);
    const probe = await fsp.open(join(root, 'probe'), 'w');
    const handle = Object.getPrototypeOf(probe) as FileHandle;
    await probe.close();
    const paths = new Map<number, string>();
    const realOpen = fsp.open.bind(fsp);
    jest.spyOn(fsp, 'open').mockImplementation(async (...args: Parameters<typeof fsp.open>) => {
      const opened = await realOpen(...args);
      paths.set(opened.fd, String(args[0]));
      return opened;
    });
    for (const call of ['sync', 'datasync'] as const) {
      const real = handle[call];
      jest.spyOn(handle, call).mockImplementation(function (this: FileHandle) {
        syncs.push(`${call} ${paths.get(this.fd)}`);
        return real.call(this);
      });
    }
    syncs = [];
  });
  afterEach(async () => {
    jest.restoreAllMocks();
    await store.close();
    await rm(root, { recursive: true, force: true });
  });

  it('syncs an appended line, and the directory of a list file it created, before acknowledging', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'state', 1);
    const dir = join(root, sid);
    const list = join(dir, 'log.jsonl');
    syncs = [];
    expect(await store.append(scope, sid, 'log', 'a')).toBe(1);
    expect(syncs).toContain(`datasync ${list}`);
    expect(syncs).toContain(`sync ${dir}`); // the new file's entry
    syncs = [];
    expect(await store.append(scope, sid, 'log', 'b')).toBe(2);
    expect(syncs).toEqual([`datasync ${list}`]);
  });

  it('syncs the directory after a value is renamed into place, and after a session is created', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'state', 1);
    const dir = join(root, sid);
    expect(syncs).toContain(`sync ${root}`); // the new session directory's entry
    expect(syncs.filter((s) => s === `sync ${dir}`).length).toBeGreaterThanOrEqual(2); // value, meta
    syncs = [];
    await store.save(scope, sid, 'state', 2);
    expect(syncs.at(-1)).toBe(`sync ${dir}`);
    expect(syncs).not.toContain(`sync ${root}`);
  });

  it('syncs the data directory after a session is removed, so it does not come back', async () => {
    const sid = newId('c');
    await store.save(scope, sid, 'state', 1);
    syncs = [];
    await store.delete(scope, sid);
    expect(syncs).toContain(`sync ${root}`);
  });
});
