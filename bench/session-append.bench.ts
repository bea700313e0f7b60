/**
 * One message append at history lengths 10, 1,000 and 100,000, through the tiered store as the
 * apps build it (MySQL + Redis, createSessionInfra), beside seed 000's saveConversationSession:
 * the whole conversation document rewritten on every append (one MySQL row upsert + one Redis SET).
 * Uses its own database (dropped after) and key prefix on TEST_MYSQL_URL / TEST_REDIS_URL.
 * Then the embedded profile's file store (a temporary directory, removed after): its append as
 * shipped, the line synced (fdatasync) before it is acknowledged, beside the same append with the
 * sync calls made no-ops (what it did before it synced), in the same run on the same disk.
 */
import { once } from 'events';
import fsp, { FileHandle, mkdtemp, rm, writeFile } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import {
  createTestDatabase,
  createTestPrefix,
  TEST_MYSQL_URL,
  TEST_REDIS_URL,
} from '@loom/testing';
import { DEFAULT_SESSION_OPTIONS, SessionOptions } from '@loom/session/config/session-options';
import { newId } from '@loom/session/ids';
import { StateKeys } from '@loom/session/model/state-keys';
import { createSessionInfra } from '@loom/session/session.providers';
import { FileSessionStore } from '@loom/session/store/file/file-session.store';
import { TieredSessionStore } from '@loom/session/store/tiered/tiered-session.store';
import { ms, sample, summarize, Summary, table } from './stats';
import { onInterrupt } from './interrupt';
import { openWholeDocument } from './whole-document.baseline';

const LENGTHS = [10, 1_000, 100_000];
const SAMPLES = 200;
const WARMUP = 20;
/** The baseline rewrites up to ~15 MB per append at 100,000: it gets a time budget, not 200 samples. */
const BASELINE_BUDGET_MS = 20_000;
const INSERT_BATCH = 5_000;
const TABLE = 'loom_session_state';

/**
 * A chat message of ~135 bytes of JSON: small enough that the baseline's 100,000-message document
 * (~14 MB, ~16 MB once escaped in SQL) fits MySQL's default max_allowed_packet of 16 MB.
 */
const message = (n: number) => ({
  role: n % 2 ? 'user' : 'assistant',
  content: `message ${n}: non-compete?`,
  agentType: null,
  taskId: null,
  createdAt: '2026-01-01T00:00:00.000Z',
  tokens: 12,
});

export async function run(): Promise<void> {
  const db = await createTestDatabase('loom_bench');
  const prefix = createTestPrefix('loombench');
  const remove = onInterrupt(() =>
    Promise.all([db.drop(), prefix.cleanup()]).then(() => undefined),
  );
  let hotErrors = 0;
  const infra = await createSessionInfra(benchOptions(db.url, prefix.prefix), () => hotErrors++);
  try {
    const redis = infra.redis!;
    if (redis.status !== 'ready') await once(redis, 'ready');
    const store = infra.store as TieredSessionStore;
    const scope = { tenantId: 'bench' };
    const baseline = openWholeDocument(infra.dataSource!, redis, prefix.prefix);
    const rows: Array<{ length: number; loom: Summary; naive: Summary; docBytes: number }> = [];

    for (const length of LENGTHS) {
      const sid = newId('c');
      await prefill(infra.dataSource!, sid, length);
      const cached = await store.durable.getList(scope, sid, StateKeys.messages);
      for (let i = 0; i < cached.length; i += INSERT_BATCH)
        await store.hot.fillList(scope, sid, StateKeys.messages, cached.slice(i, i + INSERT_BATCH));
      let n = length;
      const errorsBefore = hotErrors;
      const loom = summarize(
        await sample(() => store.append(scope, sid, StateKeys.messages, message(++n)), {
          count: SAMPLES,
          warmup: WARMUP,
        }),
      );
      // every append also reached Redis: the cached list is still whole
      const hotLength = await store.hot.listLengthIfComplete(scope, sid, StateKeys.messages);
      if (hotLength !== n || hotErrors !== errorsBefore)
        throw new Error(`the hot tier missed appends at ${length} (${hotErrors} errors)`);

      const doc = baseline.start(newId('c'), length, message);
      await doc.save();
      const naive = summarize(
        await sample(() => doc.append(), {
          count: SAMPLES,
          warmup: Math.min(WARMUP, 3),
          budgetMs: BASELINE_BUDGET_MS,
          minCount: 20,
        }),
      );
      rows.push({ length, loom, naive, docBytes: doc.bytes() });
    }
    print(rows);
  } finally {
    await infra.close();
    await remove();
  }
  await runFileStore();
}

/** The file store's append, synced (as shipped) and with its sync calls made no-ops. */
async function runFileStore(): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'loom-bench-file-'));
  const removeRoot = onInterrupt(() => rm(root, { recursive: true, force: true }));
  try {
    const store = new FileSessionStore(root);
    const scope = { tenantId: 'bench' };
    const rows: Array<{ length: number; synced: Summary; unsynced: Summary }> = [];
    for (const length of LENGTHS) {
      const sid = newId('c');
      await store.save(scope, sid, StateKeys.conversation, { conversationId: sid });
      const lines = Array.from(
        { length },
        (_, i) => `${JSON.stringify({ index: i + 1, value: message(i + 1) })}\n`,
      );
      await writeFile(join(root, sid, `${StateKeys.messages}.jsonl`), lines.join(''));
      let n = length;
      const append = () => store.append(scope, sid, StateKeys.messages, message(++n));
      const synced = summarize(await sample(append, { count: SAMPLES, warmup: WARMUP }));
      const unsynced = summarize(
        await withoutSync(() => sample(append, { count: SAMPLES, warmup: WARMUP })),
      );
      rows.push({ length, synced, unsynced });
    }
    await store.close();
    console.log(`\nsession-append, embedded file store: one message append, ms (${root})`);
    console.log(
      table(
        ['history', 'synced p50', 'synced p99', 'unsynced p50', 'unsynced p99', 'n'],
        rows.map((r) => [
          r.length.toLocaleString('en-US'),
          ms(r.synced.p50),
          ms(r.synced.p99),
          ms(r.unsynced.p50),
          ms(r.unsynced.p99),
          String(r.synced.n),
        ]),
      ),
    );
  } finally {
    await removeRoot();
  }
}

/** Runs `work` with FileHandle's sync and datasync as no-ops (the bench's "before"). */
async function withoutSync<T>(work: () => Promise<T>): Promise<T> {
  const probe = await fsp.open(tmpdir(), 'r');
  const handle = Object.getPrototypeOf(probe) as FileHandle;
  await probe.close();
  const real = { sync: handle.sync, datasync: handle.datasync };
  handle.sync = handle.datasync = () => Promise.resolve();
  try {
    return await work();
  } finally {
    Object.assign(handle, real);
  }
}

/** The history of `length` messages, written straight into the item table in multi-row INSERTs. */
async function prefill(
  dataSource: NonNullable<Awaited<ReturnType<typeof createSessionInfra>>['dataSource']>,
  sid: string,
  length: number,
): Promise<void> {
  await dataSource.query(
    `INSERT INTO ${TABLE} (session_id, state_key, item_index, tenant_id, state_data) VALUES (?, ?, 0, 'bench', ?)`,
    [sid, StateKeys.conversation, JSON.stringify({ conversationId: sid })],
  );
  for (let from = 1; from <= length; from += INSERT_BATCH) {
    const to = Math.min(from + INSERT_BATCH - 1, length);
    const params: unknown[] = [];
    for (let i = from; i <= to; i++)
      params.push(sid, StateKeys.messages, i, 'bench', JSON.stringify(message(i)));
    await dataSource.query(
      `INSERT INTO ${TABLE} (session_id, state_key, item_index, tenant_id, state_data) VALUES ` +
        Array.from({ length: to - from + 1 }, () => '(?, ?, ?, ?, ?)').join(', '),
      params,
    );
  }
}

/** The apps' session options (the library's defaults) on the bench's database and prefix. */
function benchOptions(mysqlUrl: string, keyPrefix: string): SessionOptions {
  return { ...DEFAULT_SESSION_OPTIONS, mysqlUrl, redisUrl: TEST_REDIS_URL, keyPrefix, dataDir: '' };
}

function print(rows: Array<{ length: number; loom: Summary; naive: Summary; docBytes: number }>) {
  console.log(
    `\nsession-append: one message append, ms (MySQL ${new URL(TEST_MYSQL_URL).host}, Redis ${new URL(TEST_REDIS_URL).host})`,
  );
  console.log(
    table(
      ['history', 'loom p50', 'loom p99', 'n', 'naive p50', 'naive p99', 'n', 'naive doc'],
      rows.map((r) => [
        r.length.toLocaleString('en-US'),
        ms(r.loom.p50),
        ms(r.loom.p99),
        String(r.loom.n),
        ms(r.naive.p50),
        ms(r.naive.p99),
        String(r.naive.n),
        `${(r.docBytes / 1e6).toFixed(2)} MB`,
      ]),
    ),
  );
  const first = rows[0];
  const last = rows[rows.length - 1];
  const loomRatio = last.loom.p50 / first.loom.p50;
  const naiveRatio = last.naive.p50 / first.naive.p50;
  console.log(
    `p50@${last.length} / p50@${first.length}: loom ${loomRatio.toFixed(2)} ` +
      `(target <= 1.3: ${loomRatio <= 1.3 ? 'met' : 'NOT met'}), naive whole-document ${naiveRatio.toFixed(1)}`,
  );
}
