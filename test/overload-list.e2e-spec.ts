import Redis from 'ioredis';
import { NO_AGENTS, useOverloadSystem } from './overload.support';
import { client } from './system';

const CONVERSATIONS = 300;
const LISTINGS = 50;

/**
 * One user listing their conversations from many clients at once while Redis holds none of them
 * (a hot tier emptied by a restart, an eviction or idle TTLs), on a Redis and a MariaDB of this
 * suite's own: every page reads its conversations from MySQL. MySQL answers all the while, so
 * every listing is whole (200), never 503 "the durable store is unavailable": a page must not
 * fan out so wide that the listings overflow the MySQL pool's queue.
 */
describe('system: many conversation listings at once from a cold hot tier', () => {
  const suite = useOverloadSystem('loom_overload_list', {}, { without: NO_AGENTS });

  it('answers every page of every listing while MySQL answers', async () => {
    const { sys, redis } = suite;
    const api = client(sys.base, sys.token('tenant-list', 'alice'));
    for (let i = 0; i < CONVERSATIONS; i += 20)
      await Promise.all(Array.from({ length: 20 }, () => api('POST', '/v1/conversations', {})));
    // This suite's own Redis: emptied, so every conversation is read from MySQL.
    const r = new Redis(redis.url);
    await r.flushall();
    await r.quit();

    const listing = async (): Promise<{ statuses: number[]; listed: number }> => {
      const statuses: number[] = [];
      let listed = 0;
      for (let cursor: string | null = ''; cursor !== null;) {
        const res = await api(
          'GET',
          `/v1/conversations?limit=100${cursor ? `&cursor=${cursor}` : ''}`,
        );
        statuses.push(res.status);
        if (res.status !== 200) break;
        listed += res.body.items.length;
        cursor = res.body.nextCursor;
      }
      return { statuses, listed };
    };
    const listings = await Promise.all(Array.from({ length: LISTINGS }, listing));
    const statuses = listings.flatMap((l) => l.statuses);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(listings.map((l) => l.listed)).toEqual(Array(LISTINGS).fill(CONVERSATIONS));
  });
});
