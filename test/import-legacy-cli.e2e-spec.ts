import { spawnSync } from 'child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { ConversationRepository, createSessionInfra, SessionInfra } from '@loom/session';
import {
  createTestDatabase,
  createTestPrefix,
  PrivateRedisServer,
  TEST_REDIS_URL,
} from '@loom/testing';
const { root } = require('../scripts/lib/processes');

/** The built importer (npm run session:import-legacy). */
const cli = join(root, 'dist', 'apps', 'orchestrator', 'src', 'cli', 'import-legacy.js');

/**
 * `npm run session:import-legacy` writes conversations into MYSQL_URL: an argument it does not
 * take must be refused before anything is read or written, never taken as the value of a flag
 * (a file after an unknown flag would otherwise be left out of the import without a word).
 * (MYSQL_URL names a closed port here: a run that tried to import would fail to connect instead.)
 */
describe('system: npm run session:import-legacy arguments', () => {
  let dir: string;
  let file: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'loom-import-cli-'));
    file = join(dir, 'cli_session_1.json');
    writeFileSync(file, JSON.stringify({ memory: { messages: [] } }));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const importLegacy = (...args: string[]) =>
    spawnSync(process.execPath, [cli, ...args], {
      env: { ...process.env, MYSQL_URL: 'mysql://root@127.0.0.1:1/loom_import_cli' },
      encoding: 'utf8',
      timeout: 60_000,
    });

  it('prints its usage for --help and exits 0, importing nothing', () => {
    const out = importLegacy('--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run session:import-legacy');
  });

  it('refuses an unknown flag, naming it, instead of swallowing the file after it', () => {
    const out = importLegacy('--tenant', 't1', '--user', 'u1', '--force', file);
    expect(out.status).toBe(2);
    expect(out.stderr).toContain('--force');
    expect(out.stderr).toContain('usage: npm run session:import-legacy');
    expect(out.stderr).not.toMatch(/\n\s+at /);
  });

  it('refuses a Redis Cluster setting the apps refuse, naming it, before anything is read', () => {
    const standalone: Record<string, string | undefined> = {
      ...process.env,
      MYSQL_URL: 'mysql://root@127.0.0.1:1/loom_import_cli',
      REDIS_CLUSTER_NODES: undefined,
      REDIS_CLUSTER_NAT_MAP: undefined,
    };
    for (const [env, named] of [
      [{ REDIS_CLUSTER_NODES: '10.0.0.1:6379,not-a-node' }, 'REDIS_CLUSTER_NODES'],
      [
        { REDIS_CLUSTER_NODES: '10.0.0.1:6379', REDIS_CLUSTER_NAT_MAP: '10.0.0.1:6379' },
        'REDIS_CLUSTER_NAT_MAP',
      ],
      // A map for a standalone Redis would be silently ignored.
      [{ REDIS_CLUSTER_NAT_MAP: '10.0.0.1:6379=127.0.0.1:30001' }, 'REDIS_CLUSTER_NAT_MAP'],
      // A cluster has database 0 only.
      [
        { REDIS_CLUSTER_NODES: '10.0.0.1:6379', REDIS_URL: 'redis://127.0.0.1:6379/3' },
        'REDIS_URL',
      ],
    ] as const) {
      const out = spawnSync(process.execPath, [cli, '--tenant', 't1', '--user', 'u1', file], {
        env: { ...standalone, ...env },
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(out.status).toBe(1);
      expect(out.stderr).toContain('invalid configuration');
      expect(out.stderr).toContain(named);
    }
  });

  it('refuses a flag given twice or without its value', () => {
    for (const args of [
      ['--tenant', 't1', '--tenant', 't2', '--user', 'u1', file],
      ['--user', 'u1', file, '--tenant'],
    ]) {
      const out = importLegacy(...args);
      expect(out.status).toBe(2);
      expect(out.stderr).toContain('usage: npm run session:import-legacy');
    }
  });
});

/**
 * A conversation the deployment has in Redis (a resumed import, one in use) is served as the
 * import left it, not as the older copy Redis held, until that expired.
 */
describe('system: npm run session:import-legacy with the conversation cached in Redis', () => {
  const alice = { tenantId: 'tenant-a', userId: 'alice' };
  const messages = ['q1', 'a1', 'q2', 'a2'].map((content, i) => ({
    role: i % 2 ? ('assistant' as const) : ('user' as const),
    content,
  }));
  let dir: string;
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let prefix: ReturnType<typeof createTestPrefix>;
  let infra: SessionInfra;
  const open = () =>
    createSessionInfra({ mysqlUrl: db.url, redisUrl: TEST_REDIS_URL, keyPrefix: prefix.prefix });
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'loom-import-cached-'));
    db = await createTestDatabase('loom_import_cli');
    prefix = createTestPrefix('import-cli');
    infra = await open();
  });
  afterAll(async () => {
    await infra?.close();
    await prefix.cleanup();
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the next read after a resumed import shows every message and the count', async () => {
    // An earlier run that stopped after two messages, read since (so Redis holds that copy).
    const conversations = new ConversationRepository(infra.store, { idleExpiryDays: 30 });
    await conversations.create(alice, 'cached_session_1', { importedFrom: 'legacy' });
    for (const m of messages.slice(0, 2))
      await conversations.appendMessage(alice, 'cached_session_1', {
        ...m,
        agentType: null,
        taskId: null,
        createdAt: new Date().toISOString(),
        tokens: 0,
      });
    const meta = await conversations.get(alice, 'cached_session_1');
    meta.messageCount = 2;
    await conversations.save(alice, meta);
    expect((await conversations.messages(alice, 'cached_session_1')).length).toBe(2);

    const file = join(dir, 'cached_session_1.json');
    writeFileSync(file, JSON.stringify({ memory: { messages } }));
    const out = spawnSync(
      process.execPath,
      [cli, '--tenant', alice.tenantId, '--user', alice.userId, file],
      {
        env: {
          ...process.env,
          MYSQL_URL: db.url,
          REDIS_URL: TEST_REDIS_URL,
          LOOM_KEY_PREFIX: prefix.prefix,
        },
        encoding: 'utf8',
        timeout: 60_000,
      },
    );
    expect(out.stderr).toBe('');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('"status":"resumed"');

    // Another app of the deployment, reading through Redis.
    const reader = await open();
    try {
      const again = new ConversationRepository(reader.store, { idleExpiryDays: 30 });
      expect((await again.get(alice, 'cached_session_1')).messageCount).toBe(4);
      expect((await again.messages(alice, 'cached_session_1')).map((m) => m.content)).toEqual(
        messages.map((m) => m.content),
      );
    } finally {
      await reader.close();
    }
  });
});

/**
 * With the deployment's Redis out of reach (its server stopped, holding the conversation), an
 * import must not leave Redis serving the older copy once it answers again: the cache entries it
 * could not update or drop were only remembered by the importer's process, which exits.
 */
describe('system: npm run session:import-legacy while Redis is out of reach', () => {
  const alice = { tenantId: 'tenant-a', userId: 'alice' };
  const messages = ['q1', 'a1', 'q2', 'a2'].map((content, i) => ({
    role: i % 2 ? ('assistant' as const) : ('user' as const),
    content,
  }));
  let dir: string;
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let redis: PrivateRedisServer;
  const prefix = 'loom-import-down:';
  const open = () =>
    createSessionInfra({ mysqlUrl: db.url, redisUrl: redis.url, keyPrefix: prefix });
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'loom-import-down-'));
    db = await createTestDatabase('loom_import_down');
    redis = await PrivateRedisServer.start();
  });
  afterAll(async () => {
    redis?.resume();
    await redis?.kill();
    await db?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('what the apps read through Redis afterwards is what MySQL holds', async () => {
    const infra = await open();
    try {
      const conversations = new ConversationRepository(infra.store, { idleExpiryDays: 30 });
      await conversations.create(alice, 'down_session_1', { importedFrom: 'legacy' });
      for (const m of messages.slice(0, 2))
        await conversations.appendMessage(alice, 'down_session_1', {
          ...m,
          agentType: null,
          taskId: null,
          createdAt: new Date().toISOString(),
          tokens: 0,
        });
      const meta = await conversations.get(alice, 'down_session_1');
      meta.messageCount = 2;
      await conversations.save(alice, meta);
      // Read since: Redis holds this copy.
      expect((await conversations.messages(alice, 'down_session_1')).length).toBe(2);
    } finally {
      await infra.close();
    }

    const file = join(dir, 'down_session_1.json');
    writeFileSync(file, JSON.stringify({ memory: { messages } }));
    redis.pause(); // SIGSTOP: the server keeps what it holds but answers nothing
    let out;
    try {
      out = spawnSync(
        process.execPath,
        [cli, '--tenant', alice.tenantId, '--user', alice.userId, file],
        {
          env: { ...process.env, MYSQL_URL: db.url, REDIS_URL: redis.url, LOOM_KEY_PREFIX: prefix },
          encoding: 'utf8',
          timeout: 60_000,
        },
      );
    } finally {
      redis.resume();
    }
    // The run says it did not do the job (nothing silently left stale)…
    expect(out.status).toBe(1);
    expect(out.stderr).toContain('Redis');

    // …and another app of the deployment, reading through Redis, sees what MySQL holds.
    const reader = await open();
    try {
      const again = new ConversationRepository(reader.store, { idleExpiryDays: 30 });
      const durable = await again.get(alice, 'down_session_1', true);
      expect((await again.get(alice, 'down_session_1')).messageCount).toBe(durable.messageCount);
      expect((await again.messages(alice, 'down_session_1')).length).toBe(
        await again.messageCount(alice, 'down_session_1', true),
      );
    } finally {
      await reader.close();
    }
  });
});
