import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { transpileModule, ModuleKind } from 'typescript';
import { Worker } from 'worker_threads';
import { localTokenSecret } from './local-token-secret';

/**
 * `localTokenSecret(dir)` in `n` threads at once (released together by a barrier), as
 * processes started side by side on one data directory run it: what each got, or its error.
 */
function drawnTogether(dir: string, n: number): Promise<string[]> {
  const code = transpileModule(readFileSync(join(__dirname, 'local-token-secret.ts'), 'utf8'), {
    compilerOptions: { module: ModuleKind.CommonJS },
  }).outputText;
  const barrier = new Int32Array(new SharedArrayBuffer(4));
  const thread = `
    const { workerData, parentPort } = require('worker_threads');
    const module = { exports: {} };
    new Function('require', 'module', 'exports', workerData.code)(require, module, module.exports);
    Atomics.add(workerData.barrier, 0, 1);
    while (Atomics.load(workerData.barrier, 0) < workerData.n);
    try { parentPort.postMessage(module.exports.localTokenSecret(workerData.dir)); }
    catch (err) { parentPort.postMessage('error: ' + err.message); }`;
  return Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<string>((resolve, reject) => {
          const worker = new Worker(thread, { eval: true, workerData: { code, barrier, n, dir } });
          worker.once('message', resolve);
          worker.once('error', reject);
        }),
    ),
  );
}

describe('localTokenSecret', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'loom-token-secret-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('draws a random secret once, keeps it readable by its owner only, and reads it back', () => {
    const data = join(dir, 'data');
    const secret = localTokenSecret(data);
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    expect(localTokenSecret(data)).toBe(secret);
    expect(readFileSync(join(data, 'token-secret'), 'utf8')).toBe(secret);
    expect(statSync(join(data, 'token-secret')).mode & 0o077).toBe(0);
    expect(localTokenSecret(join(dir, 'other'))).not.toBe(secret);
  });

  it('gives starts side by side on a new data directory one secret, never a file half written', async () => {
    // A race: a round without the fix of this test fails only now and then, so it runs many.
    for (let round = 0; round < 50; round++) {
      const data = join(dir, `data-${round}`);
      const got = await drawnTogether(data, 4);
      const secret = readFileSync(join(data, 'token-secret'), 'utf8');
      expect(secret).toMatch(/^[0-9a-f]{64}$/);
      expect(got).toEqual([secret, secret, secret, secret]);
      expect(readdirSync(data)).toEqual(['token-secret']); // no draft left behind
    }
  });
});
