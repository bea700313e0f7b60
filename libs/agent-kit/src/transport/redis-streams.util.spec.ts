import { unlessAborted } from './redis-streams.util';

describe('unlessAborted', () => {
  const never = () => new Promise<string>(() => undefined);

  it('answers the work when it settles first', async () => {
    await expect(
      unlessAborted(Promise.resolve('read'), new AbortController().signal),
    ).resolves.toBe('read');
    await expect(
      unlessAborted(Promise.reject(new Error('down')), new AbortController().signal),
    ).rejects.toThrow('down');
  });

  // A command ioredis queued while it waits to reconnect never settles once it is disconnected.
  it('answers undefined once the signal aborts, however long the work takes', async () => {
    const stop = new AbortController();
    const waiting = unlessAborted(never(), stop.signal);
    stop.abort();
    await expect(waiting).resolves.toBeUndefined();
  });

  it('does not wait for the work when the signal has already aborted', async () => {
    const stop = new AbortController();
    stop.abort();
    await expect(unlessAborted(never(), stop.signal)).resolves.toBeUndefined();
    // A rejection after the abort is dropped, not an unhandled rejection.
    await expect(unlessAborted(Promise.reject(new Error('late')), stop.signal)).resolves.toBe(
      undefined,
    );
  });
});
