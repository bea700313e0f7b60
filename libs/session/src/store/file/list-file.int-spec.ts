import { appendFile, mkdtemp, rm } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import { LoomErrorCode } from '../../errors/session-error';
import { appendItem, LAST_INDEXES_KEPT, listsCached } from './list-file';

/**
 * The last index of every list file appended to was kept for the life of the process: one entry
 * per conversation ever written, a heap that grew with the store. Bounded now; a list whose entry
 * was dropped re-reads its last index from the file.
 */
describe('file store lists: what is kept about them in memory', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'loom-list-file-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps at most LAST_INDEXES_KEPT lists, and a list dropped appends where it left off', async () => {
    const files = Array.from({ length: LAST_INDEXES_KEPT + 20 }, (_, i) => join(dir, `${i}.jsonl`));
    for (let i = 0; i < files.length; i += 50)
      await Promise.all(files.slice(i, i + 50).map((file) => appendItem(file, '"first"')));
    expect(listsCached()).toBeLessThanOrEqual(LAST_INDEXES_KEPT);

    // The first lists' entries are the ones dropped: their last index comes from the file again,
    // including a line written by another hand since.
    await appendFile(files[0], '{"index":2,"value":"by hand"}\n');
    expect(await appendItem(files[0], '"next"')).toBe(3);
    expect(await appendItem(files[1], '"next"')).toBe(2);
    await expect(appendItem(files[1], '"again"', 2)).rejects.toMatchObject({
      code: LoomErrorCode.CONFLICT,
    });
  });
});
