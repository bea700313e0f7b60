import { Logger } from '@nestjs/common';
import { LoomEnv } from '@loom/agent-kit';
import { MAX_SIGNALLED_SCANS, RecoveryScheduler, SIGNAL_SLOT_MS } from './recovery.scheduler';

/** The scheduler's timing of signalled scans, over a scan that only counts its calls. */
function scheduler() {
  const scans: number[] = [];
  const recovery = {
    start: async () => {
      scans.push(Date.now());
      return {
        indexed: 0,
        due: 0,
        finished: Promise.resolve({ indexed: 0, due: 0, recovered: 0 }),
      };
    },
  };
  const s = new RecoveryScheduler(
    { RECOVERY_INTERVAL_MS: 30_000 } as LoomEnv,
    {} as never,
    recovery as never,
    {} as never,
    {} as never,
  );
  return { s, scans };
}

describe('RecoveryScheduler: signalled scans', () => {
  beforeEach(() => {
    jest.useFakeTimers();
    jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => {
    jest.useRealTimers();
    jest.restoreAllMocks();
  });

  it('runs one scan for signals due in the same slot, however many arrive', async () => {
    const { s, scans } = scheduler();
    for (let i = 0; i < 200; i++) s.scanIn(100, 'orchestrator-x is stopping');
    await jest.advanceTimersByTimeAsync(2 * SIGNAL_SLOT_MS);
    expect(scans).toHaveLength(1);
  });

  it('keeps at most MAX_SIGNALLED_SCANS waiting; the rest is left to the interval', async () => {
    const { s, scans } = scheduler();
    for (let i = 0; i < 100; i++) s.scanIn(i * 10 * SIGNAL_SLOT_MS, 'flood');
    await jest.advanceTimersByTimeAsync(1000 * SIGNAL_SLOT_MS);
    expect(scans).toHaveLength(MAX_SIGNALLED_SCANS);
  });

  it('runs no signalled scan once stopping', async () => {
    const { s, scans } = scheduler();
    s.scanIn(100, 'before');
    s.beforeApplicationShutdown();
    s.scanIn(100, 'after');
    await jest.advanceTimersByTimeAsync(2 * SIGNAL_SLOT_MS);
    expect(scans).toEqual([]);
  });
});
