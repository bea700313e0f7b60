import { Logger } from '@nestjs/common';
import Redis from 'ioredis';
import { createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { RedisClient } from '@loom/session';
import { Entry, writeDeadLetter } from './redis-streams.entries';
import {
  CONSUMER_GROUP,
  deadLetterStreamKey,
  replyStreamKey,
  requestStreamKey,
} from './redis-streams.options';
import { closeConnection, createConnection, fieldsToRecord } from './redis-streams.util';

const PATTERN = 'agent.deadcopy.execute';

/**
 * A dead-lettered request's copy is kept for inspection (about the latest 10,000 per type, no
 * time limit): it must not keep what the request carried, its signed assignment and the
 * conversation's text, which DELETE of the conversation (or its expiry) removes everywhere
 * else. It keeps a reference: the request's ids, the reason, the entry id.
 */
describe('Redis Streams transport: a dead-letter copy keeps a reference, not the request', () => {
  const prefix = createTestPrefix('loomdeadcopy');
  const key = requestStreamKey(prefix.prefix, PATTERN);
  const deadKey = deadLetterStreamKey(prefix.prefix, PATTERN);
  const replyTo = replyStreamKey(prefix.prefix, 'c0ffee');
  let admin: Redis;
  let cmd: RedisClient;

  beforeAll(async () => {
    admin = new Redis(TEST_REDIS_URL);
    cmd = createConnection({ url: TEST_REDIS_URL }, 'dead-copy', {
      type: 'cmd',
      logger: new Logger('dead-copy'),
      status: () => undefined,
      listeners: [],
      commandTimeoutMs: 4000,
    });
  });
  afterAll(async () => {
    await closeConnection(cmd);
    admin?.disconnect();
    await prefix.cleanup();
  });

  it('keeps the ids and the reason, without the assignment signature or the history', async () => {
    const signature = 'ab'.repeat(32);
    const history = 'my salary is 12000 and my boss fired me on Monday';
    const data = {
      assignment: {
        tenantId: 'tenant-dead',
        userId: 'alice',
        conversationId: 'c_deadcopy01',
        taskId: 't_deadcopy01',
        agentSessionId: 'as_deadcopy01',
        agentType: 'deadcopy',
        expiresAt: Date.now() + 60_000,
        signature,
      },
      meta: { correlationId: 'corr-deadcopy', tenantId: 'tenant-dead', taskId: 't_deadcopy01' },
      history: [{ role: 'user', content: history }],
    };
    await admin.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
    await admin.xadd(key, '*', 'id', 'req-dead', 'replyTo', replyTo, 'data', JSON.stringify(data));
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
    const entry: Entry = {
      key,
      pattern: PATTERN,
      entryId,
      fields: fieldsToRecord(raw),
      deliveryCount: 6,
    };

    await writeDeadLetter(cmd, entry, deadKey, 'delivered 6 times (max 5)');

    const dead = await admin.xrange(deadKey, '-', '+');
    expect(dead).toHaveLength(1);
    const copy = fieldsToRecord(dead[0][1]);
    expect(JSON.stringify(copy)).not.toContain(signature);
    expect(JSON.stringify(copy)).not.toContain('salary');
    expect(copy).toMatchObject({
      id: 'req-dead',
      replyTo,
      entryId,
      reason: 'delivered 6 times (max 5)',
    });
    expect(JSON.parse(copy.ref)).toEqual({
      assignment: {
        tenantId: 'tenant-dead',
        userId: 'alice',
        conversationId: 'c_deadcopy01',
        taskId: 't_deadcopy01',
        agentSessionId: 'as_deadcopy01',
        agentType: 'deadcopy',
      },
      meta: { correlationId: 'corr-deadcopy', tenantId: 'tenant-dead', taskId: 't_deadcopy01' },
      dataChars: JSON.stringify(data).length,
    });
  });
});
