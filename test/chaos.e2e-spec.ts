import { formatReport, runChaos } from '@loom/testing';

/**
 * A short, fixed-seed run of the randomized crash audit (`npm run chaos` runs it for longer):
 * turns through two orchestrators while processes are SIGKILLed, SIGSTOPped and Redis paused,
 * then every invariant of "loses nothing when a process dies" checked after a quiet period.
 */
describe('system: chaos (random kills and pauses, then the invariants)', () => {
  it('loses nothing, stores nothing twice, and answers only documented statuses', async () => {
    const report = await runChaos({ seed: 20261123, durationMs: 30_000, conversations: 4 });
    console.log(formatReport(report));
    expect(report.violations).toEqual([]);
    expect(report.turnsAcked).toBeGreaterThan(0);
  }, 240_000);
});
