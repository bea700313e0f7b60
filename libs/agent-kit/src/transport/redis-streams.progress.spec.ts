import {
  MAX_PROGRESS_INTERVAL_MS,
  MIN_PROGRESS_INTERVAL_MS,
  ProgressBeat,
  firstProgressDelay,
  progressInterval,
} from './redis-streams.progress';

describe('progress reports', () => {
  it('come four times per silence bound, between 50 ms and 10 s apart', () => {
    expect(progressInterval(1500)).toBe(375);
    expect(progressInterval(120_000)).toBe(MAX_PROGRESS_INTERVAL_MS);
    expect(progressInterval(100)).toBe(MIN_PROGRESS_INTERVAL_MS);
  });

  it('start after one interval, or at once for a request picked up late in its wait', () => {
    const sent = 1_000_000;
    const startBy = sent + 1500;
    expect(firstProgressDelay(sent + 10, startBy, 375)).toBe(375); // picked up at once
    expect(firstProgressDelay(sent + 900, startBy, 375)).toBe(225); // due before the caller gives up
    expect(firstProgressDelay(sent + 1400, startBy, 375)).toBe(0);
    expect(firstProgressDelay(sent + 9000, startBy, 375)).toBe(0);
  });

  describe('ProgressBeat', () => {
    beforeEach(() => jest.useFakeTimers());
    afterEach(() => jest.useRealTimers());

    it('sends nothing for a handler that ends within the first interval', () => {
      const send = jest.fn(async () => undefined);
      const beat = new ProgressBeat(100, 100, send);
      jest.advanceTimersByTime(99);
      beat.stop();
      jest.advanceTimersByTime(1000);
      expect(send).not.toHaveBeenCalled();
    });

    it('sends every interval until stopped, never while one is still unanswered', async () => {
      let answer: () => void = () => undefined;
      const send = jest.fn(() => new Promise<void>((resolve) => (answer = resolve)));
      const beat = new ProgressBeat(100, 0, send);
      jest.advanceTimersByTime(0);
      expect(send).toHaveBeenCalledTimes(1);
      jest.advanceTimersByTime(300); // Redis is slow: no report piles up behind the first
      expect(send).toHaveBeenCalledTimes(1);
      answer();
      await Promise.resolve();
      await Promise.resolve();
      jest.advanceTimersByTime(100);
      expect(send).toHaveBeenCalledTimes(2);
      beat.stop();
      answer();
      jest.advanceTimersByTime(1000);
      expect(send).toHaveBeenCalledTimes(2);
    });

    it('goes on after a send that throws at once, instead of throwing from its timer', async () => {
      const send = jest.fn(() => {
        throw new Error('no connection');
      });
      const beat = new ProgressBeat(100, 0, send);
      jest.advanceTimersByTime(0);
      await Promise.resolve();
      await Promise.resolve();
      jest.advanceTimersByTime(100);
      expect(send).toHaveBeenCalledTimes(2);
      beat.stop();
    });
  });
});
