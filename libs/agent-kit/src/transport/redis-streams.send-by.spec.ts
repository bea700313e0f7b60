import { SendBy, entryMs } from './redis-streams.send-by';

describe('SendBy', () => {
  it('is unknown for a stream until an XADD there was answered', () => {
    const sendBy = new SendBy();
    expect(sendBy.of('s', 5000, 0)).toBeUndefined();
    sendBy.observe('other', '1000-0', 10);
    expect(sendBy.of('s', 5000, 0)).toBeUndefined();
  });

  it("puts an XADD that ran after its caller's time-out past sendBy, on Redis's clock", () => {
    const sendBy = new SendBy();
    // Redis's clock is 1,000,000 ms ahead; the entry id was taken up to 3 ms before the answer.
    sendBy.observe('s', '1000097-0', 100);
    const limit = sendBy.of('s', 5000, 200)!;
    // The caller gives up at 5200 on its clock, 1,005,200 on Redis's: anything later is late.
    expect(limit).toBeLessThan(1_005_200);
    expect(limit).toBeGreaterThanOrEqual(1_005_200 - 5);
  });

  it('keeps the tightest bound it has learnt', () => {
    const sendBy = new SendBy();
    sendBy.observe('s', '1000090-0', 100); // a slow answer: a looser bound
    sendBy.observe('s', '1000199-0', 200);
    sendBy.observe('s', '1000250-0', 300);
    expect(sendBy.of('s', 0, 0)).toBe(999_998);
  });

  it("falls back to a bound of Redis's clock read otherwise, while a stream has none", () => {
    const clock: { floor?: number } = {};
    const sendBy = new SendBy(() => clock.floor);
    expect(sendBy.of('s', 5000, 200)).toBeUndefined();
    clock.floor = 1_000_000;
    expect(sendBy.of('s', 5000, 200)).toBe(1_005_199);
    sendBy.observe('s', '1000299-0', 300); // the stream's own bound wins
    expect(sendBy.of('s', 5000, 400)).toBe(1_005_398);
    expect(sendBy.of('other', 5000, 400)).toBe(1_005_399);
  });

  it('reads the ms of an entry id', () => {
    expect(entryMs('1700000000123-7')).toBe(1700000000123);
  });
});
