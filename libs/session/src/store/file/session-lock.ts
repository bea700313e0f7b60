const chains = new Map<string, Promise<void>>();

/**
 * Runs `work` after all work queued earlier under `key` has settled: a per-session promise chain,
 * shared by every store of this process. It orders writes inside ONE process only.
 */
export function serialised<T>(key: string, work: () => Promise<T>): Promise<T> {
  const run = (chains.get(key) ?? Promise.resolve()).then(work);
  const tail = run.then(
    () => undefined,
    () => undefined,
  );
  chains.set(key, tail);
  void tail.then(() => {
    if (chains.get(key) === tail) chains.delete(key);
  });
  return run;
}

/** Settles when all work queued so far under keys starting with `prefix` has settled. */
export async function drain(prefix: string): Promise<void> {
  const tails = [...chains].filter(([key]) => key.startsWith(prefix)).map(([, tail]) => tail);
  await Promise.all(tails);
}
