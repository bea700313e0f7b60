import { TaskStatus } from '@loom/session';
import { RECHECK_MS, StaleLockHolder } from './stale-lock-holder';

/** The holder check over stores that count their reads (the rule itself: pure logic). */
function holder(leaseEndsInMs: number) {
  let reads = 0;
  const owner = { tenantId: 't', userId: 'u' };
  const task = () => ({
    status: TaskStatus.RUNNING,
    lease: { owner: 'o', expiresAt: new Date(Date.now() + leaseEndsInMs).toISOString() },
  });
  const check = new StaleLockHolder(
    { find: async () => (reads++, { activeTaskIds: ['t_1'] }) } as never,
    { get: async () => (reads++, task()) } as never,
    { run: async () => (reads++, { lockToken: 'tok', conversationId: 'c_1' }) } as never,
    {
      expired: (t: { lease: { expiresAt: string } }) => Date.parse(t.lease.expiresAt) <= Date.now(),
      now: () => Date.now(),
    } as never,
  );
  return { ask: (token = 'tok') => check.taskOf(owner, 'c_1', token), reads: () => reads };
}

describe('StaleLockHolder', () => {
  afterEach(() => jest.useRealTimers());

  it('names the task of a holder whose lease ran out', async () => {
    const h = holder(-1);
    expect(await h.ask()).toBe('t_1');
  });

  it('asks about a live or unnamed holder again only after RECHECK_MS', async () => {
    jest.useFakeTimers();
    const live = holder(60_000);
    expect(await live.ask()).toBeNull();
    const first = live.reads();
    for (let i = 0; i < 10; i++) expect(await live.ask()).toBeNull();
    expect(live.reads()).toBe(first);
    jest.advanceTimersByTime(RECHECK_MS + 1);
    await live.ask();
    expect(live.reads()).toBe(2 * first);

    const unnamed = holder(60_000);
    expect(await unnamed.ask('another-token')).toBeNull();
    const once = unnamed.reads();
    await unnamed.ask('another-token');
    expect(unnamed.reads()).toBe(once);
  });
});
