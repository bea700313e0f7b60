import { Logger } from '@nestjs/common';
import { FreezableTcpProxy, PrivateRedisServer } from '@loom/testing';
import Redis from 'ioredis';
import { RedisClient } from '@loom/session';
import { Entry, requeueEntry, writeDeadLetter } from './redis-streams.entries';
import {
  CONSUMER_GROUP,
  deadLetterStreamKey,
  replyStreamKey,
  requestStreamKey,
} from './redis-streams.options';
import { closeConnection, createConnection, fieldsToRecord } from './redis-streams.util';

const PATTERN = 'agent.resendwrites.execute';

/**
 * An agent's writes that settle an entry (its move to the dead-letter stream, its return to the
 * stream) must not happen twice when ioredis sends them again: a connection reset right after
 * Redis ran one loses its answer, and the transport's connections send again, once reconnected,
 * what they left unanswered (autoResendUnfulfilledCommands, ioredis' default). A second
 * dead-letter copy counted twice in `loom_dead_letters`; a second copy of a returned request was
 * run twice by the agents.
 */
describe('Redis Streams transport: an entry is settled once when its write is sent again (private redis-server)', () => {
  let redis: PrivateRedisServer;
  let proxy: FreezableTcpProxy;
  let admin: Redis;
  let cmd: RedisClient;
  let n = 0;
  const keyPrefix = 'loomresendw:';
  const key = requestStreamKey(keyPrefix, PATTERN);
  const deadKey = deadLetterStreamKey(keyPrefix, PATTERN);
  const replyTo = replyStreamKey(keyPrefix, 'c0ffee');

  beforeAll(async () => {
    redis = await PrivateRedisServer.start();
    proxy = await FreezableTcpProxy.start({ host: '127.0.0.1', port: redis.port });
    admin = new Redis(redis.url);
  });
  beforeEach(async () => {
    await admin.del(key, deadKey, replyTo);
    await admin.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
    // The transport's own connection settings (autoResendUnfulfilledCommands on).
    cmd = createConnection({ url: `redis://127.0.0.1:${proxy.port}` }, `resend-writes-${++n}`, {
      type: 'cmd',
      logger: new Logger('resend-writes'),
      status: () => undefined,
      listeners: [],
      commandTimeoutMs: 4000,
    });
    await cmd.ping();
  });
  afterEach(async () => closeConnection(cmd));
  afterAll(async () => {
    admin?.disconnect();
    await proxy?.close();
    await redis?.kill();
  });

  /** Adds a request and delivers it to consumer `c1`, as XREADGROUP hands it to an agent. */
  async function delivered(): Promise<Entry> {
    await admin.xadd(key, '*', 'id', `req-${n}`, 'replyTo', replyTo, 'data', '{"n":1}');
    const reply = (await admin.xreadgroup(
      'GROUP',
      CONSUMER_GROUP,
      'c1',
      'COUNT',
      1,
      'STREAMS',
      key,
      '>',
    )) as [string, [string, string[]][]][];
    const [entryId, raw] = reply[0][1][0];
    return { key, pattern: PATTERN, entryId, fields: fieldsToRecord(raw), deliveryCount: 1 };
  }

  it('dead-letters an entry once when the write that ran is sent again after a reset', async () => {
    const entry = await delivered();
    proxy.resetOnNextAnswer();
    await writeDeadLetter(cmd, entry, deadKey, 'delivered 6 times (max 5)');
    const dead = await admin.xrange(deadKey, '-', '+');
    expect(dead.map(([, fields]) => fieldsToRecord(fields).entryId)).toEqual([entry.entryId]);
    const replies = await admin.xrange(replyTo, '-', '+');
    expect(replies.map(([, fields]) => fieldsToRecord(fields).id)).toEqual([entry.fields.id]);
    expect(await admin.xlen(key)).toBe(0);
  }, 30_000);

  it('returns an entry to its stream once when the write that ran is sent again after a reset', async () => {
    const entry = await delivered();
    proxy.resetOnNextAnswer();
    await requeueEntry(cmd, entry);
    const queued = await admin.xrange(key, '-', '+');
    expect(queued.map(([, fields]) => fieldsToRecord(fields).id)).toEqual([entry.fields.id]);
    expect(queued[0][0]).not.toBe(entry.entryId);
    const [pending] = (await admin.xpending(key, CONSUMER_GROUP)) as [number];
    expect(pending).toBe(0);
  }, 30_000);
});
