import type { LlmResult, LlmStream } from './llm.types';

type Produce = (emit: (delta: string) => void) => Promise<LlmResult>;

/**
 * Runs `produce` at once and buffers what it emits, so `result` settles whether or not anyone
 * reads `deltas` (one reader). `deltas` ends when `produce` resolves and throws when it fails.
 */
export function createDeltaStream(produce: Produce): LlmStream {
  const buffered: string[] = [];
  let finished = false;
  let failed = false;
  let failure: unknown;
  let wake: (() => void) | undefined;
  const notify = () => {
    wake?.();
    wake = undefined;
  };

  const result = produce((delta) => {
    if (!delta) return;
    buffered.push(delta);
    notify();
  }).then(
    (value) => {
      finished = true;
      notify();
      return value;
    },
    (error: unknown) => {
      finished = failed = true;
      failure = error;
      notify();
      throw error;
    },
  );
  result.catch(() => undefined);

  async function* deltas(): AsyncGenerator<string> {
    for (;;) {
      const next = buffered.shift();
      if (next !== undefined) {
        yield next;
      } else if (finished) {
        if (failed) throw failure;
        return;
      } else {
        await new Promise<void>((resolve) => (wake = resolve));
      }
    }
  }

  return { deltas: deltas(), result };
}
