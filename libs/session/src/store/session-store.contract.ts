/**
 * The SessionStore contract: the one spec every backend passes (memory, JSON files, MySQL, Redis,
 * tiered). Call it from a `*.int-spec.ts` next to the backend:
 *
 *   runSessionStoreContract('redis', async () => {
 *     const store = new RedisSessionStore(...);
 *     return { store, cleanup: async () => { await store.close(); await dropMyData(); } };
 *   });
 *
 * The factory runs once per suite (beforeAll); `cleanup` (afterAll) must close the store and remove
 * what the suite wrote. Every test uses fresh random tenant and session ids, so tests never share
 * data and the backend may hold other data meanwhile.
 */
import { LoomError, LoomErrorCode } from '../errors/session-error';
import { newId } from '../ids';
import type { SessionStore, SessionSummary, StoreScope } from './session-store';

export type SessionStoreFactory = () => Promise<{
  store: SessionStore;
  cleanup: () => Promise<void>;
}>;
type GetStore = () => SessionStore;

const { INVALID_ID, NOT_FOUND, CONFLICT, STALE_FENCING_TOKEN, VALIDATION_FAILED, SUPERSEDED } =
  LoomErrorCode;
const tenant = (): StoreScope => ({ tenantId: newId('t') });
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const range = (from: number, to: number): number[] =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);
const ids = (rows: SessionSummary[]): string[] => rows.map((row) => row.sessionId);
const sorted = (keys: string[]): string[] => [...keys].sort();

/** What a call ended with: 'resolved', the code of a LoomError, or a description of another error. */
async function outcome(call: () => Promise<unknown>): Promise<string> {
  try {
    await call();
    return 'resolved';
  } catch (err) {
    return err instanceof LoomError ? err.code : `not a LoomError: ${String(err).slice(0, 200)}`;
  }
}

/** Outcomes of several named calls, run one after another, as { name: outcome }. */
async function outcomes(
  calls: Record<string, () => Promise<unknown>>,
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const [name, call] of Object.entries(calls)) out[name] = await outcome(call);
  return out;
}

const every = (calls: Record<string, unknown>, code: string): Record<string, string> =>
  Object.fromEntries(Object.keys(calls).map((name) => [name, code]));

/** Declares the contract suite for one backend. */
export interface ContractOptions {
  /**
   * False for a backend that cannot tell ids or keys apart by case alone (the file store on a
   * case-insensitive file system): the byte-for-byte test is left out for it.
   */
  caseSensitive?: boolean;
}

export function runSessionStoreContract(
  name: string,
  factory: SessionStoreFactory,
  opts: ContractOptions = {},
): void {
  describe(`SessionStore contract: ${name}`, () => {
    let made: Awaited<ReturnType<SessionStoreFactory>> | undefined;
    beforeAll(async () => {
      made = await factory();
    });
    afterAll(async () => {
      await made?.cleanup();
    });
    const store: GetStore = () => {
      if (!made) throw new Error('the store factory failed');
      return made.store;
    };

    valueTests(store);
    createTests(store);
    listTests(store);
    sessionTests(store);
    tenantTests(store, opts);
    idTests(store);
    listSessionsTests(store);
    fencingTests(store);
    executionTests(store);
    concurrencyTests(store);
  });
}

function valueTests(store: GetStore): void {
  describe('save / get', () => {
    it('round-trips JSON values: objects, arrays, numbers, falsy values, Chinese text and emoji', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      const values: Record<string, unknown> = {
        object: { a: 1, nested: { list: [true, false, null, 'x'], empty: {} } },
        array: [1, 'two', { three: 3 }, [4], []],
        integer: 42,
        float: -3.25,
        zero: 0,
        flag: false,
        empty: '',
        text: '会话管理:你好,世界 👋🏽🚀 "quoted" \\ back\nslash \u2028',
        big: '会'.repeat(20_000) + '😀'.repeat(2_000),
      };
      for (const [key, value] of Object.entries(values)) await s.save(a, sid, key, value);
      for (const [key, value] of Object.entries(values))
        expect(await s.get(a, sid, key)).toEqual(value);
    });

    it('stores JSON: a value reads back as its JSON text says, whichever tier answers', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      const value = { at: new Date(0), gone: undefined, nan: NaN, list: [undefined, 1] };
      await s.save(a, sid, 'state', value);
      await s.append(a, sid, 'log', value);
      // As JSON text: toStrictEqual would also compare the realm objects were made in.
      const json = JSON.stringify({ at: '1970-01-01T00:00:00.000Z', nan: null, list: [null, 1] });
      const got = await s.get<Record<string, unknown>>(a, sid, 'state');
      expect([JSON.stringify(got), typeof got?.at, 'gone' in (got ?? {})]).toEqual([
        json,
        'string',
        false,
      ]);
      const [item] = await s.getList<Record<string, unknown>>(a, sid, 'log');
      expect([JSON.stringify(item.value), typeof item.value.at]).toEqual([json, 'string']);
    });

    it('returns null for an absent key or session, and save overwrites', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      expect(await s.get(a, newId('c'), 'state')).toBeNull();
      await s.save(a, sid, 'state', { v: 1, extra: 'x' });
      expect(await s.get(a, sid, 'other')).toBeNull();
      await s.save(a, sid, 'state', { v: 2 });
      expect(await s.get(a, sid, 'state')).toEqual({ v: 2 });
      await s.save(a, sid, 'state', 'now a string');
      expect(await s.get(a, sid, 'state')).toBe('now a string');
    });

    it('stores copies: mutating a saved or a returned value changes nothing stored', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      const value = { n: 1, list: [1] };
      await s.save(a, sid, 'state', value);
      value.n = 99;
      value.list.push(2);
      const got = (await s.get<{ n: number; list: number[] }>(a, sid, 'state'))!;
      got.list.push(3);
      expect(await s.get(a, sid, 'state')).toEqual({ n: 1, list: [1] });
      await s.append(a, sid, 'log', value);
      (await s.getList<{ n: number }>(a, sid, 'log'))[0].value.n = -1;
      expect(await s.getList(a, sid, 'log')).toEqual([
        { index: 1, value: { n: 99, list: [1, 2] } },
      ]);
    });

    it('treats keys named like Object.prototype members as ordinary keys', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      for (const key of ['__proto__', 'constructor', 'toString'])
        await s.save(a, sid, key, { key });
      await s.append(a, sid, 'hasOwnProperty', 1);
      expect(await s.get(a, sid, '__proto__')).toEqual({ key: '__proto__' });
      expect(await s.get(a, sid, 'constructor')).toEqual({ key: 'constructor' });
      expect(await s.get(a, sid, 'valueOf')).toBeNull();
      expect(sorted(await s.listSessionKeys(a, sid))).toEqual(
        sorted(['__proto__', 'constructor', 'toString', 'hasOwnProperty']),
      );
    });
  });
}

function createTests(store: GetStore): void {
  describe('create', () => {
    it('is true the first time, false when the key exists (for any tenant), and keeps the value', async () => {
      const [s, a, b, sid] = [store(), tenant(), tenant(), newId('c')];
      expect(await s.create(a, sid, 'lock', { v: 1 })).toBe(true);
      expect(await s.create(a, sid, 'lock', { v: 2 })).toBe(false);
      expect(await s.create(b, sid, 'lock', { v: 3 })).toBe(false);
      expect(await s.get(a, sid, 'lock')).toEqual({ v: 1 });
      await s.save(a, sid, 'saved', 'first');
      expect(await s.create(a, sid, 'saved', 'second')).toBe(false);
      expect(await s.get(a, sid, 'saved')).toBe('first');
    });
  });
}

function listTests(store: GetStore): void {
  describe('append / getList / listLength', () => {
    it('appends at 1, 2, 3 and lists {index, value} in index order', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      expect(await s.getList(a, sid, 'log')).toEqual([]);
      expect(await s.listLength(a, sid, 'log')).toBe(0);
      expect(await s.append(a, sid, 'log', { role: 'user', text: '你好 👋' })).toBe(1);
      expect(await s.append(a, sid, 'log', ['b'])).toBe(2);
      expect(await s.append(a, sid, 'log', 0)).toBe(3);
      expect(await s.getList(a, sid, 'log')).toEqual([
        { index: 1, value: { role: 'user', text: '你好 👋' } },
        { index: 2, value: ['b'] },
        { index: 3, value: 0 },
      ]);
      expect(await s.listLength(a, sid, 'log')).toBe(3);
    });

    it('applies afterIndex, then last, then limit', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      for (const n of range(1, 10)) await s.append(a, sid, 'log', `v${n}`);
      const indexes = async (r: Parameters<SessionStore['getList']>[3]): Promise<number[]> =>
        (await s.getList<string>(a, sid, 'log', r)).map((item) => item.index);
      expect(await indexes({})).toEqual(range(1, 10));
      expect(await indexes({ afterIndex: 7 })).toEqual([8, 9, 10]);
      expect(await indexes({ afterIndex: 0 })).toEqual(range(1, 10));
      expect(await indexes({ afterIndex: 10 })).toEqual([]);
      expect(await indexes({ last: 3 })).toEqual([8, 9, 10]);
      expect(await indexes({ last: 50 })).toEqual(range(1, 10));
      expect(await indexes({ limit: 2 })).toEqual([1, 2]);
      expect(await indexes({ afterIndex: 2, limit: 3 })).toEqual([3, 4, 5]);
      expect(await indexes({ afterIndex: 8, last: 5 })).toEqual([9, 10]);
      expect(await indexes({ last: 4, limit: 2 })).toEqual([7, 8]);
      expect(await indexes({ afterIndex: 2, last: 5, limit: 2 })).toEqual([6, 7]);
      expect((await s.getList(a, sid, 'log', { afterIndex: 8 })).map((i) => i.value)).toEqual([
        'v9',
        'v10',
      ]);
    });

    it('rejects list bounds and explicit indexes that are not whole numbers in range, writing nothing', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      await s.append(a, sid, 'log', 'one');
      const calls = {
        negativeAfter: () => s.getList(a, sid, 'log', { afterIndex: -1 }),
        fractionalAfter: () => s.getList(a, sid, 'log', { afterIndex: 0.5 }),
        negativeLast: () => s.getList(a, sid, 'log', { last: -1 }),
        fractionalLimit: () => s.getList(a, sid, 'log', { limit: 1.5 }),
        indexZero: () => s.append(a, sid, 'log', 'zero', { index: 0 }),
        fractionalIndex: () => s.append(a, sid, 'log', 'half', { index: 2.5 }),
        negativePage: () => s.listSessions(a, 'log', { limit: -1 }),
      };
      expect(await outcomes(calls)).toEqual(every(calls, VALIDATION_FAILED));
      expect(await s.getList(a, sid, 'log')).toEqual([{ index: 1, value: 'one' }]);
    });

    it('rejects a taken explicit index with CONFLICT and changes nothing; a free one works', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      await s.append(a, sid, 'log', 'one');
      await s.append(a, sid, 'log', 'two');
      expect(await outcome(() => s.append(a, sid, 'log', 'again', { index: 2 }))).toBe(CONFLICT);
      expect(await outcome(() => s.append(a, sid, 'log', 'again', { index: 1 }))).toBe(CONFLICT);
      expect(await s.getList(a, sid, 'log')).toEqual([
        { index: 1, value: 'one' },
        { index: 2, value: 'two' },
      ]);
      expect(await s.listLength(a, sid, 'log')).toBe(2);
      expect(await s.append(a, sid, 'log', 'three', { index: 3 })).toBe(3);
      expect(await s.append(a, sid, 'log', 'four')).toBe(4);
      expect((await s.getList(a, sid, 'log')).map((i) => i.value)).toEqual([
        'one',
        'two',
        'three',
        'four',
      ]);
      expect(await s.append(a, newId('c'), 'log', 'first', { index: 1 })).toBe(1);
    });
  });
}

function sessionTests(store: GetStore): void {
  describe('exists / listSessionKeys / deleteKey / delete', () => {
    it('lists value and list keys; deleteKey removes one key, value or whole list', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      expect(await s.exists(a, sid)).toBe(false);
      expect(await s.listSessionKeys(a, sid)).toEqual([]);
      await s.save(a, sid, 'v2', 2);
      expect(await s.exists(a, sid)).toBe(true);
      await s.save(a, sid, 'v1', 1);
      await s.append(a, sid, 'list', 'x');
      await s.append(a, sid, 'list', 'y');
      expect(sorted(await s.listSessionKeys(a, sid))).toEqual(['list', 'v1', 'v2']);
      await s.deleteKey(a, sid, 'v1');
      expect(await s.get(a, sid, 'v1')).toBeNull();
      await s.deleteKey(a, sid, 'list');
      expect(await s.getList(a, sid, 'list')).toEqual([]);
      expect(await s.listLength(a, sid, 'list')).toBe(0);
      await s.deleteKey(a, sid, 'never-there');
      expect(await s.listSessionKeys(a, sid)).toEqual(['v2']);
      expect(await s.get(a, sid, 'v2')).toBe(2);
      expect(await s.append(a, sid, 'list', 'fresh')).toBe(1);
    });

    it('a session that holds only a fencing token does not exist and has no keys', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      expect(await s.nextFence(a, sid)).toBe(1);
      expect(await s.exists(a, sid)).toBe(false);
      expect(await s.listSessionKeys(a, sid)).toEqual([]);
      await s.save(a, sid, 'state', 1, { fence: 1 });
      expect(await s.exists(a, sid)).toBe(true);
    });

    it('delete removes the whole session and only that one', async () => {
      const [s, a, sid, other] = [store(), tenant(), newId('c'), newId('c')];
      for (const id of [sid, other]) {
        await s.save(a, id, 'state', { id });
        await s.append(a, id, 'log', id);
      }
      await s.delete(a, sid);
      expect(await s.exists(a, sid)).toBe(false);
      expect(await s.get(a, sid, 'state')).toBeNull();
      expect(await s.getList(a, sid, 'log')).toEqual([]);
      expect(await s.listLength(a, sid, 'log')).toBe(0);
      expect(await s.listSessionKeys(a, sid)).toEqual([]);
      expect(await s.get(a, other, 'state')).toEqual({ id: other });
      expect(await s.getList(a, other, 'log')).toEqual([{ index: 1, value: other }]);
      await s.delete(a, newId('c'));
      expect(await s.append(a, sid, 'log', 'again')).toBe(1);
    });

    it('keeps the same key of two sessions apart', async () => {
      const [s, a, one, two] = [store(), tenant(), newId('c'), newId('c')];
      await s.save(a, one, 'state', 'one');
      await s.save(a, two, 'state', 'two');
      await s.append(a, one, 'log', 'one');
      expect(await s.get(a, one, 'state')).toBe('one');
      expect(await s.get(a, two, 'state')).toBe('two');
      expect(await s.getList(a, two, 'log')).toEqual([]);
      expect(await s.append(a, two, 'log', 'two')).toBe(1);
      expect(await s.getList(a, one, 'log')).toEqual([{ index: 1, value: 'one' }]);
    });
  });
}

function tenantTests(store: GetStore, opts: ContractOptions): void {
  describe('tenant isolation', () => {
    it("another tenant reads A's session as absent and cannot delete or write it", async () => {
      const [s, a, b, sid] = [store(), tenant(), tenant(), newId('c')];
      await s.save(a, sid, 'state', { owner: 'a' }, { userId: newId('a') });
      await s.append(a, sid, 'log', 'a1');
      await s.append(a, sid, 'log', 'a2');

      expect(await s.get(b, sid, 'state')).toBeNull();
      expect(await s.getList(b, sid, 'log')).toEqual([]);
      expect(await s.listLength(b, sid, 'log')).toBe(0);
      expect(await s.exists(b, sid)).toBe(false);
      expect(await s.listSessionKeys(b, sid)).toEqual([]);
      expect(await s.listSessions(b, 'state', { limit: 10 })).toEqual([]);
      await s.delete(b, sid);
      await s.deleteKey(b, sid, 'state');
      await s.deleteKey(b, sid, 'log');

      const writes = {
        save: () => s.save(b, sid, 'state', { owner: 'b' }),
        saveNewKey: () => s.save(b, sid, 'new', 'b'),
        append: () => s.append(b, sid, 'log', 'b1'),
        appendNewKey: () => s.append(b, sid, 'newlog', 'b1'),
        createNewKey: () => s.create(b, sid, 'new', 'b'),
        nextFence: () => s.nextFence(b, sid),
      };
      expect(await outcomes(writes)).toEqual(every(writes, NOT_FOUND));
      expect(await s.create(b, sid, 'state', { owner: 'b' })).toBe(false);

      expect(await s.get(a, sid, 'state')).toEqual({ owner: 'a' });
      expect(await s.getList(a, sid, 'log')).toEqual([
        { index: 1, value: 'a1' },
        { index: 2, value: 'a2' },
      ]);
      expect(sorted(await s.listSessionKeys(a, sid))).toEqual(['log', 'state']);
      expect(await s.get(a, sid, 'new')).toBeNull();
      expect(await s.nextFence(a, sid)).toBe(1);
    });

    it('a session belongs to the tenant of its first write, whatever the write', async () => {
      const [s, a, b] = [store(), tenant(), tenant()];
      const [byAppend, byCreate, byFence] = [newId('c'), newId('c'), newId('c')];
      await s.append(b, byAppend, 'log', 'b');
      await s.create(b, byCreate, 'lock', 'b');
      await s.nextFence(b, byFence);
      const writes = {
        save: () => s.save(a, byAppend, 'state', 'a'),
        append: () => s.append(a, byCreate, 'log', 'a'),
        create: () => s.create(a, byFence, 'lock', 'a'),
      };
      expect(await outcomes(writes)).toEqual(every(writes, NOT_FOUND));
      expect(await s.getList(b, byAppend, 'log')).toEqual([{ index: 1, value: 'b' }]);
      expect(await s.listSessionKeys(b, byCreate)).toEqual(['lock']);
      expect(await s.get(b, byFence, 'lock')).toBeNull();
    });

    const caseTest = opts.caseSensitive === false ? it.skip : it;
    caseTest(
      'compares tenants, users, session ids and keys byte for byte: case makes another one',
      async () => {
        const s = store();
        const lower = { tenantId: `acme-${newId('t').slice(2).toLowerCase()}` };
        const upper = { tenantId: lower.tenantId.toUpperCase() };
        const sid = `c_case_${newId('c').slice(2).toLowerCase()}`;
        await s.save(lower, sid, 'state', 'lower', { userId: 'alice' });
        await s.append(lower, sid, 'log', 'lower');
        expect(await s.get(upper, sid, 'state')).toBeNull();
        expect(await s.getList(upper, sid, 'log')).toEqual([]);
        expect(await s.exists(upper, sid)).toBe(false);
        expect(await s.listSessions(upper, 'state', { limit: 10 })).toEqual([]);
        expect(await s.listSessions(lower, 'state', { limit: 10, userId: 'ALICE' })).toEqual([]);
        expect(await outcome(() => s.save(upper, sid, 'state', 'upper'))).toBe(NOT_FOUND);
        // Another case of the id or the key is another session or key, free to take.
        expect(await s.get(lower, sid.toUpperCase(), 'state')).toBeNull();
        await s.save(upper, sid.toUpperCase(), 'state', 'upper');
        expect(await s.get(lower, sid, 'STATE')).toBeNull();
        await s.save(lower, sid, 'STATE', 'other key');
        expect(await s.get(lower, sid, 'state')).toBe('lower');
        expect(await s.get(upper, sid.toUpperCase(), 'state')).toBe('upper');
      },
    );
  });
}

const BAD_SESSION_IDS: Array<[string, string]> = [
  ['../x', '../x'],
  ['a/b', 'a/b'],
  ['*', '*'],
  ['{x}', '{x}'],
  ['x\\u0000y', 'x\u0000y'],
  ['of 10 KB', 'a'.repeat(10 * 1024)],
  ['short_7 (7 chars)', 'short_7'],
];
const BAD_KEYS: Array<[string, string]> = [
  ['../k', '../k'],
  ['a/b', 'a/b'],
  ['k\\u0000', 'k\u0000'],
  ['(empty)', ''],
  ['..', '..'],
  ['of 161 chars', 'k'.repeat(161)],
];

function idTests(store: GetStore): void {
  describe('ids and state keys', () => {
    it.each(BAD_SESSION_IDS)(
      'sessionId %s: INVALID_ID from every method, nothing written',
      async (_label, bad) => {
        const [s, a, legit] = [store(), tenant(), newId('c')];
        await s.save(a, legit, 'marker', 'legit');
        const before = await s.listSessions(a, 'marker', { limit: 100 });
        const calls = {
          save: () => s.save(a, bad, 'marker', 'x'),
          create: () => s.create(a, bad, 'marker', 'x'),
          get: () => s.get(a, bad, 'marker'),
          append: () => s.append(a, bad, 'marker', 'x'),
          getList: () => s.getList(a, bad, 'marker'),
          listLength: () => s.listLength(a, bad, 'marker'),
          exists: () => s.exists(a, bad),
          listSessionKeys: () => s.listSessionKeys(a, bad),
          deleteKey: () => s.deleteKey(a, bad, 'marker'),
          delete: () => s.delete(a, bad),
          nextFence: () => s.nextFence(a, bad),
          listSessionsBefore: () =>
            s.listSessions(a, 'marker', {
              limit: 9,
              before: { updatedAt: new Date(), sessionId: bad },
            }),
        };
        expect(await outcomes(calls)).toEqual(every(calls, INVALID_ID));
        expect(await s.listSessions(a, 'marker', { limit: 100 })).toEqual(before);
        expect(ids(before)).toEqual([legit]);
      },
    );

    it.each(BAD_KEYS)('state key %s: INVALID_ID, nothing written', async (_label, bad) => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      await s.save(a, sid, 'legit', 1);
      const calls = {
        save: () => s.save(a, sid, bad, 'x'),
        create: () => s.create(a, sid, bad, 'x'),
        get: () => s.get(a, sid, bad),
        append: () => s.append(a, sid, bad, 'x'),
        getList: () => s.getList(a, sid, bad),
        listLength: () => s.listLength(a, sid, bad),
        deleteKey: () => s.deleteKey(a, sid, bad),
        listSessions: () => s.listSessions(a, bad, { limit: 10 }),
      };
      expect(await outcomes(calls)).toEqual(every(calls, INVALID_ID));
      expect(await s.listSessionKeys(a, sid)).toEqual(['legit']);
    });

    it('tenant ids are validated too', async () => {
      const [s, sid] = [store(), newId('c')];
      const bad = { tenantId: '../t' };
      const calls = {
        save: () => s.save(bad, sid, 'state', 'x'),
        get: () => s.get(bad, sid, 'state'),
        exists: () => s.exists(bad, sid),
        listSessions: () => s.listSessions(bad, 'state', { limit: 10 }),
      };
      expect(await outcomes(calls)).toEqual(every(calls, INVALID_ID));
    });
  });
}

function listSessionsTests(store: GetStore): void {
  describe('listSessions', () => {
    it('lists the sessions holding a key, newest first, in pages, filtered by user', async () => {
      const [s, a, b] = [store(), tenant(), tenant()];
      const [u1, u2] = [newId('a'), newId('a')];
      const sids = range(0, 4).map(() => newId('c'));
      const windows: Array<[number, number]> = [];
      for (const [i, sid] of sids.entries()) {
        const start = Date.now();
        await s.save(a, sid, 'marker', i, { userId: i % 2 === 0 ? u1 : u2 });
        windows.push([start, Date.now()]);
        await sleep(15);
      }
      await s.save(a, newId('c'), 'unrelated', 1);
      await s.save(b, newId('c'), 'marker', 'b', { userId: u1 });

      const all = await s.listSessions(a, 'marker', { limit: 10 });
      expect(ids(all)).toEqual([...sids].reverse());
      expect(all.map((row) => row.userId)).toEqual([u1, u2, u1, u2, u1]);
      for (const row of all) {
        const [start, end] = windows[sids.indexOf(row.sessionId)];
        expect(row.updatedAt).toBeInstanceOf(Date);
        expect(row.updatedAt.getTime()).toBeGreaterThanOrEqual(start - 1000);
        expect(row.updatedAt.getTime()).toBeLessThanOrEqual(end + 1000);
      }

      const page1 = await s.listSessions(a, 'marker', { limit: 2 });
      expect(ids(page1)).toEqual([sids[4], sids[3]]);
      const page2 = await s.listSessions(a, 'marker', { limit: 2, before: page1[1] });
      expect(ids(page2)).toEqual([sids[2], sids[1]]);
      const page3 = await s.listSessions(a, 'marker', { limit: 2, before: page2[1] });
      expect(ids(page3)).toEqual([sids[0]]);
      expect(await s.listSessions(a, 'marker', { limit: 2, before: page3[0] })).toEqual([]);

      expect(ids(await s.listSessions(a, 'marker', { limit: 10, userId: u1 }))).toEqual([
        sids[4],
        sids[2],
        sids[0],
      ]);
      expect(ids(await s.listSessions(a, 'marker', { limit: 10, userId: u2 }))).toEqual([
        sids[3],
        sids[1],
      ]);
      expect(
        ids(await s.listSessions(a, 'marker', { limit: 1, userId: u1, before: all[0] })),
      ).toEqual([sids[2]]);
      expect(await s.listSessions(a, 'marker', { limit: 10, userId: newId('a') })).toEqual([]);
      expect(await s.listSessions(a, 'never-saved', { limit: 10 })).toEqual([]);
      expect(await s.listSessions(a, 'marker', { limit: 0 })).toEqual([]);
    });

    it('moves a session to the front when its value is saved again; lists do not count', async () => {
      const [s, a] = [store(), tenant()];
      const sids = range(0, 2).map(() => newId('c'));
      for (const sid of sids) {
        await s.save(a, sid, 'marker', 1);
        await s.append(a, sid, 'messages', 'hello');
        await sleep(15);
      }
      await s.save(a, sids[0], 'marker', 2);
      await sleep(15);
      await s.append(a, sids[1], 'messages', 'again');
      await s.append(a, newId('c'), 'marker', 'a list item, not the single value');
      expect(ids(await s.listSessions(a, 'marker', { limit: 10 }))).toEqual([
        sids[0],
        sids[2],
        sids[1],
      ]);
      const [row] = await s.listSessions(a, 'marker', { limit: 1 });
      expect(row).toEqual({ sessionId: sids[0], userId: null, updatedAt: expect.any(Date) });
      await s.delete(a, sids[0]);
      expect(ids(await s.listSessions(a, 'marker', { limit: 10 }))).toEqual([sids[2], sids[1]]);
    });
  });
}

function fencingTests(store: GetStore): void {
  describe('fencing', () => {
    it('issues 1, 2, … per session; the latest token writes, an older one is STALE_FENCING_TOKEN', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      expect(await s.nextFence(a, sid)).toBe(1);
      expect(await s.nextFence(a, sid)).toBe(2);
      await s.save(a, sid, 'state', 'fenced-2', { fence: 2 });
      expect(await s.append(a, sid, 'log', 'fenced-2', { fence: 2 })).toBe(1);
      expect(await s.nextFence(a, sid)).toBe(3);

      const stale = {
        save: () => s.save(a, sid, 'state', 'stale', { fence: 2 }),
        append: () => s.append(a, sid, 'log', 'stale', { fence: 2 }),
        create: () => s.create(a, sid, 'new', 'stale', { fence: 1 }),
      };
      expect(await outcomes(stale)).toEqual(every(stale, STALE_FENCING_TOKEN));
      expect(await s.get(a, sid, 'state')).toBe('fenced-2');
      expect(await s.getList(a, sid, 'log')).toEqual([{ index: 1, value: 'fenced-2' }]);
      expect(await s.get(a, sid, 'new')).toBeNull();

      // A stale holder learns it is stale, also when the key it would create exists already.
      expect(await outcome(() => s.create(a, sid, 'state', 'stale', { fence: 2 }))).toBe(
        STALE_FENCING_TOKEN,
      );
      expect(await s.create(a, sid, 'state', 'current', { fence: 3 })).toBe(false);
      expect(await s.get(a, sid, 'state')).toBe('fenced-2');

      await s.save(a, sid, 'state', 'fenced-3', { fence: 3 });
      expect(await s.get(a, sid, 'state')).toBe('fenced-3');
      await s.save(a, sid, 'state', 'unfenced');
      expect(await s.append(a, sid, 'log', 'unfenced')).toBe(2);
      expect(await s.get(a, sid, 'state')).toBe('unfenced');
      expect(await s.nextFence(a, newId('c'))).toBe(1);
      expect(await s.nextFence(a, sid)).toBe(4);
    });

    it("delete of a session never fenced keeps nothing: its id is anyone's again, as in MySQL", async () => {
      const [s, a, b, sid] = [store(), tenant(), tenant(), newId('c')];
      await s.save(a, sid, 'state', 'first');
      await s.append(a, sid, 'log', 'x');
      await s.delete(a, sid);
      await s.save(b, sid, 'state', 'other');
      expect(await s.get(b, sid, 'state')).toBe('other');
      expect(await s.nextFence(b, sid)).toBe(1);
    });

    it('delete keeps the counter: a holder paused across it stays fenced out when the id is locked again', async () => {
      const [s, a, b, sid] = [store(), tenant(), tenant(), newId('c')];
      const paused = await s.nextFence(a, sid); // the conversation's first turn, paused
      await s.save(a, sid, 'state', 'first', { fence: paused });
      const deleting = await s.nextFence(a, sid); // the DELETE took the lock over
      await s.delete(a, sid);
      expect(await s.exists(a, sid)).toBe(false);
      expect(await s.listSessionKeys(a, sid)).toEqual([]);
      const again = await s.nextFence(a, sid); // a turn that waited, or the id created again
      expect(again).toBeGreaterThan(deleting);
      const late = {
        save: () => s.save(a, sid, 'state', 'late', { fence: paused }),
        append: () => s.append(a, sid, 'log', 'late', { fence: paused }),
        create: () => s.create(a, sid, 'state', 'late', { fence: paused }),
      };
      expect(await outcomes(late)).toEqual(every(late, STALE_FENCING_TOKEN));
      expect(await s.exists(a, sid)).toBe(false);
      // Meanwhile the id stays its tenant's, as a fence alone keeps it.
      expect(await outcome(() => s.save(b, sid, 'state', 'other'))).toBe(NOT_FOUND);
      await s.save(a, sid, 'state', 'again', { fence: again });
      expect(await s.get(a, sid, 'state')).toBe('again');
      expect(await s.nextFence(a, sid)).toBe(again + 1);
    });
  });
}

function executionTests(store: GetStore): void {
  describe('writes of an agent execution', () => {
    it('land only while the task runs and has not recorded the execution as failed', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      const taskKey = 'task:t_exectest1';
      const running = (status: string) => ({
        status,
        executions: [
          { agentSessionId: 'a_running01', status: 'RUNNING' },
          { agentSessionId: 'a_givenup01', status: 'FAILED' },
        ],
      });
      await s.save(a, sid, taskKey, running('RUNNING'));
      const writes = (agentSessionId: string, scope = a, key = taskKey) => {
        const execution = { taskKey: key, agentSessionId };
        return {
          save: () => s.save(scope, sid, `agent:${agentSessionId}`, 'done', { execution }),
          append: () => s.append(scope, sid, `${taskKey}:shared`, agentSessionId, { execution }),
        };
      };
      const live = writes('a_running01');
      expect(await outcomes(live)).toEqual(every(live, 'resolved'));
      const givenUp = writes('a_givenup01');
      expect(await outcomes(givenUp)).toEqual(every(givenUp, SUPERSEDED));
      const noTask = writes('a_running01', a, 'task:t_notthere1');
      expect(await outcomes(noTask)).toEqual(every(noTask, SUPERSEDED));
      const foreign = writes('a_running01', tenant());
      expect(await outcomes(foreign)).toEqual(every(foreign, NOT_FOUND));
      await s.save(a, sid, taskKey, running('COMPLETED'));
      expect(await outcomes(live)).toEqual(every(live, SUPERSEDED));

      expect(await s.get(a, sid, 'agent:a_running01')).toBe('done');
      expect(await s.get(a, sid, 'agent:a_givenup01')).toBeNull();
      expect(await s.getList(a, sid, `${taskKey}:shared`)).toEqual([
        { index: 1, value: 'a_running01' },
      ]);
      // Nothing is written into a session that holds no such task (a deleted conversation).
      const gone = newId('c');
      const execution = { taskKey, agentSessionId: 'a_running01' };
      expect(await outcome(() => s.save(a, gone, 'agent:a_running01', 1, { execution }))).toBe(
        SUPERSEDED,
      );
      expect(await s.exists(a, gone)).toBe(false);
      expect(
        await outcome(() =>
          s.save(a, sid, 'x', 1, { execution: { taskKey: 'bad key', agentSessionId: 'a' } }),
        ),
      ).toBe(INVALID_ID);
    });
  });
}

function concurrencyTests(store: GetStore): void {
  describe('concurrency', () => {
    it('gives 50 concurrent appends to one list the indexes 1..50, each value once, in order', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      const returned = await Promise.all(range(0, 49).map((n) => s.append(a, sid, 'log', { n })));
      expect([...returned].sort((x, y) => x - y)).toEqual(range(1, 50));
      const items = await s.getList<{ n: number }>(a, sid, 'log');
      expect(items.map((item) => item.index)).toEqual(range(1, 50));
      expect(items.map((item) => item.value.n).sort((x, y) => x - y)).toEqual(range(0, 49));
      returned.forEach((index, n) => expect(items[index - 1].value).toEqual({ n }));
      expect(await s.listLength(a, sid, 'log')).toBe(50);
    });

    it('lets exactly one of 10 concurrent creates of a key win', async () => {
      const [s, a, sid] = [store(), tenant(), newId('c')];
      const results = await Promise.all(range(0, 9).map((n) => s.create(a, sid, 'lock', { n })));
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await s.get(a, sid, 'lock')).toEqual({ n: results.indexOf(true) });
    });

    it('starts 64 new sessions at once, each with a fence, a value and appends, all written', async () => {
      // New sessions sit side by side in the durable index: their first writes contend for the
      // same gaps, which InnoDB can break with a deadlock that the store must absorb.
      const [s, a] = [store(), tenant()];
      const sids = range(1, 64).map(() => newId('c'));
      await Promise.all(
        sids.map(async (sid, n) => {
          const fence = await s.nextFence(a, sid);
          await Promise.all([
            s.save(a, sid, 'conversation', { n }, { fence }),
            s.append(a, sid, 'messages', { n, i: 1 }, { fence }),
            s.append(a, sid, 'tasks', `t${n}`, { fence }),
          ]);
          await s.append(a, sid, 'messages', { n, i: 2 }, { fence });
        }),
      );
      for (const [n, sid] of sids.entries()) {
        expect(await s.get(a, sid, 'conversation')).toEqual({ n });
        const messages = await s.getList(a, sid, 'messages');
        expect(messages).toEqual([
          { index: 1, value: { n, i: 1 } },
          { index: 2, value: { n, i: 2 } },
        ]);
        expect(await s.getList(a, sid, 'tasks')).toEqual([{ index: 1, value: `t${n}` }]);
      }
    });
  });
}

/**
 * For a backend that reads the lapse of a fence alone on a clock it is given (memory, JSON files):
 * a deleted session's owner and fencing counter lapse an hour after the deletion or the fence's
 * last issue, unless the session is written again. `make` builds a store reading `now()`.
 */
export function runFenceLapseTests(
  name: string,
  make: (now: () => number) => Promise<{ store: SessionStore; cleanup: () => Promise<void> }>,
): void {
  describe(`${name}: a fence left alone by a deletion`, () => {
    const HOUR = 3_600_000;
    let clock = Date.now();
    let made: Awaited<ReturnType<typeof make>>;
    beforeAll(async () => {
      made = await make(() => clock);
    });
    afterAll(() => made.cleanup());

    it('lapses an hour after the deletion or its last issue; then the id is anyone’s again', async () => {
      const [s, a, b, sid] = [made.store, tenant(), tenant(), newId('c')];
      await s.save(a, sid, 'state', 1, { fence: await s.nextFence(a, sid) });
      await s.delete(a, sid);
      clock += HOUR - 1;
      expect(await outcome(() => s.save(b, sid, 'state', 'b'))).toBe(NOT_FOUND);
      expect(await s.nextFence(a, sid)).toBe(2); // issued again: an hour from now
      clock += HOUR - 1;
      expect(await s.nextFence(a, sid)).toBe(3);
      clock += HOUR;
      expect(await s.exists(a, sid)).toBe(false);
      await s.save(b, sid, 'state', 'b');
      expect(await s.nextFence(b, sid)).toBe(1);
    });

    it('stops lapsing once the session is written again', async () => {
      const [s, a, sid] = [made.store, tenant(), newId('c')];
      await s.append(a, sid, 'log', 'x', { fence: await s.nextFence(a, sid) });
      await s.delete(a, sid);
      const fence = await s.nextFence(a, sid);
      await s.append(a, sid, 'log', 'again', { fence });
      clock += 2 * HOUR;
      expect(await s.getList(a, sid, 'log')).toEqual([{ index: 1, value: 'again' }]);
      expect(await s.nextFence(a, sid)).toBe(fence + 1);
    });
  });
}
