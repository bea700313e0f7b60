import Redis from 'ioredis';
import { TEST_REDIS_URL } from '@loom/testing';
import { client, RunningSystem, startSystem } from './system';

/**
 * Found by `npm run chaos` (seed 5: Redis restarted empty while processes died): Redis may hold a
 * conversation's message list marked complete yet short of its newest messages (a refill whose
 * MySQL read came before an append whose own Redis write was lost). A same-key retry of a turn
 * that finished answers its TurnView from the messages it names, and such a list must not turn
 * that answer into a 500: the retry reads what MySQL holds.
 */
describe('system: a same-key retry answered while Redis lists the messages short', () => {
  let sys: RunningSystem;
  let redis: Redis;

  beforeAll(async () => {
    sys = await startSystem();
    redis = new Redis(TEST_REDIS_URL);
  });
  afterAll(async () => {
    redis?.disconnect();
    await sys?.stop();
  });

  it('answers the first TurnView, not a 500', async () => {
    const alice = client(sys.base, sys.token('tenant-sc', 'alice'));
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId as string;
    const send = () =>
      alice(
        'POST',
        `/v1/conversations/${id}/messages`,
        { content: '我跟公司签的劳动合同有问题' },
        { 'Idempotency-Key': 'stale-cache-key' },
      );
    const first = await send();
    expect(first.status).toBe(201);
    // The list cached whole (a read refills it), then its newest item lost from Redis only.
    expect((await alice('GET', `/v1/conversations/${id}/messages`)).body.items).toHaveLength(2);
    const list = `${sys.env.LOOM_KEY_PREFIX}s:{${id}}:messages:list`;
    expect(await redis.zcount(list, 2, 2)).toBe(1);
    await redis.zremrangebyscore(list, 2, 2);

    const retry = await send();
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual(first.body);
  });
});
