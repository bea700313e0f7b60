import { Controller, INestMicroservice, Logger, LoggerService, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern } from '@nestjs/microservices';
import Redis from 'ioredis';
import { createTestPrefix, sleep, TEST_REDIS_URL } from '@loom/testing';
import { RedisClient } from '@loom/session';
import { Entry, writeDeadLetter } from './redis-streams.entries';
import { CONSUMER_GROUP, deadLetterStreamKey, requestStreamKey } from './redis-streams.options';
import { RedisStreamsServer } from './redis-streams.server';
import { closeConnection, createConnection, fieldsToRecord } from './redis-streams.util';

const PATTERN = 'agent.deadage.execute';

@Controller()
class IdleController {
  @MessagePattern(PATTERN)
  handle(): unknown {
    return { ok: true };
  }
}
@Module({ controllers: [IdleController] })
class IdleModule {}

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 15_000; Date.now() < deadline; await sleep(50))
    if (await check()) return;
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * A dead-letter copy keeps the request's ids (tenant, user, conversation, task), and those of
 * older versions its whole `data` (the signed assignment, the conversation's text). MAXLEN alone
 * trimmed the stream: a quiet system kept its copies for good, after the conversation's DELETE.
 * Each copy is now kept for the dead-letter retention at most (MINID on Redis's clock).
 */
describe('Redis Streams transport: dead-letter copies are kept for a bounded time (shared redis, own prefix)', () => {
  const prefix = createTestPrefix('loomdeadage');
  const key = requestStreamKey(prefix.prefix, PATTERN);
  const deadKey = deadLetterStreamKey(prefix.prefix, PATTERN);
  let admin: Redis;
  let cmd: RedisClient;
  let app: INestMicroservice | undefined;

  beforeAll(async () => {
    admin = new Redis(TEST_REDIS_URL);
    cmd = createConnection({ url: TEST_REDIS_URL }, 'dead-age', {
      type: 'cmd',
      logger: new Logger('dead-age'),
      status: () => undefined,
      listeners: [],
      commandTimeoutMs: 4000,
    });
    await admin.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    await admin.del(deadKey);
  });
  afterAll(async () => {
    await closeConnection(cmd);
    admin?.disconnect();
    await prefix.cleanup();
  });

  /** A request delivered (pending on a consumer), as the server holds it. */
  const delivered = async (id: string): Promise<Entry> => {
    await admin.xadd(key, '*', 'id', id, 'data', JSON.stringify({ n: id }));
    const read = (await admin.xreadgroup(
      'GROUP',
      CONSUMER_GROUP,
      'c1',
      'COUNT',
      1,
      'STREAMS',
      key,
      '>',
    )) as [string, [string, string[]][]][];
    const [entryId, raw] = read[0][1][0];
    return { key, pattern: PATTERN, entryId, fields: fieldsToRecord(raw), deliveryCount: 6 };
  };
  const copies = async (): Promise<string[]> =>
    (await admin.xrange(deadKey, '-', '+')).map(([, f]) => fieldsToRecord(f).id);
  const redisNow = async (): Promise<number> => {
    const [s, us] = await admin.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };
  const warnings: string[] = [];
  const startAgent = async (deadLetterRetentionMs: number): Promise<void> => {
    const strategy = new RedisStreamsServer({
      redisUrl: TEST_REDIS_URL,
      keyPrefix: prefix.prefix,
      claimIdleMs: 200,
      deadLetterRetentionMs,
    });
    const logger: LoggerService = {
      log: () => undefined,
      error: () => undefined,
      warn: (message: unknown) => void warnings.push(String(message)),
    };
    app = await NestFactory.createMicroservice(IdleModule, { strategy, logger });
    await app.listen();
  };

  it('drops copies older than the retention as a new one comes; the stream expires with its newest', async () => {
    await writeDeadLetter(cmd, await delivered('req-1'), deadKey, 'poison', 500);
    const ttl = await admin.pttl(deadKey);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(500);

    await sleep(600); // req-1's copy is past the retention
    await writeDeadLetter(cmd, await delivered('req-2'), deadKey, 'poison', 500);
    expect(await copies()).toEqual(['req-2']);

    // Nothing comes after it: the stream goes once its newest copy is past the retention.
    await waitFor('the stream to expire', async () => (await admin.exists(deadKey)) === 0);
  });

  it('keeps a copy as long as the retention', async () => {
    await writeDeadLetter(cmd, await delivered('req-3'), deadKey, 'poison', 60_000);
    await writeDeadLetter(cmd, await delivered('req-4'), deadKey, 'poison', 60_000);
    expect(await copies()).toEqual(['req-3', 'req-4']);
  });

  it('a running agent trims its dead-letter streams: a quiet one keeps no copy past the retention', async () => {
    // Copies from before the limit, or from a quiet week: no dead-lettering will come to trim them.
    const now = await redisNow();
    await admin.xadd(deadKey, `${now - 120_000}-0`, 'id', 'old', 'reason', 'poison');
    await admin.xadd(deadKey, '*', 'id', 'recent', 'reason', 'poison');

    await startAgent(60_000);

    await waitFor('the old copy to go', async () => (await copies()).length === 1);
    expect(await copies()).toEqual(['recent']);
    // And once the recent one is past the retention, the stream goes whole (no instance needed).
    const ttl = await admin.pttl(deadKey);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
  });

  // A round that failed was tried again on the next reclaim pass (every claimIdleMs), and wrote
  // its warning each time: a key that can never be trimmed flooded the log.
  it('tries a stream that fails to trim again next round, not on every reclaim pass', async () => {
    await admin.set(deadKey, 'not a stream'); // WRONGTYPE for every XTRIM
    warnings.length = 0;
    await startAgent(60_000);
    const failed = () => warnings.filter((w) => w.startsWith('trimming the dead-letter stream'));
    await waitFor('the first failed trim', async () => failed().length > 0);
    await sleep(1_500); // several reclaim passes (claimIdleMs 200)
    expect(failed()).toEqual([
      expect.stringMatching(
        /^trimming the dead-letter stream of agent\.deadage\.execute: .*WRONGTYPE/,
      ),
    ]);
  });

  // Versions before the reference (redis-streams.dead-letter-copy.int-spec.ts) copied the request
  // whole: its signed assignment and the conversation's text, which a DELETE removes everywhere
  // else. Within the retention those would stay up to 7 days more.
  it('drops the copies an older version wrote with the request data, once it starts', async () => {
    const data = JSON.stringify({
      assignment: { conversationId: 'c_deadage01', signature: 'ab'.repeat(32) },
      history: [{ role: 'user', content: 'my salary is 12000' }],
    });
    // Old-format copies among newer ones, past the first batches the scrub reads.
    const ids = [...Array(1203).keys()].map((n) => (n % 600 < 2 ? `old-${n}` : `ref-${n}`));
    const seed = admin.pipeline();
    for (const id of ids)
      if (id.startsWith('old'))
        seed.xadd(deadKey, '*', 'id', id, 'data', data, 'entryId', '1-1', 'reason', 'x');
      else seed.xadd(deadKey, '*', 'id', id, 'ref', '{"dataChars":2}', 'reason', 'x');
    await seed.exec();

    await startAgent(60_000);

    const kept = ids.filter((id) => id.startsWith('ref'));
    await waitFor(
      'the old-format copies to go',
      async () => (await copies()).length === kept.length,
    );
    expect(await copies()).toEqual(kept);
  });
});
