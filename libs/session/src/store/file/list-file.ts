import { open, truncate } from 'fs/promises';
import { LRUCache } from 'lru-cache';
import { dirname, sep } from 'path';
import { indexTaken } from '../memory/store-rules';
import type { ListItem } from '../session-store';
import { damagedFile, readText, syncDir } from './session-files';

/**
 * How many lists' last indexes are kept in memory: those of the conversations written lately. One
 * per list file ever written would grow with the store; a list dropped re-reads its file once.
 */
export const LAST_INDEXES_KEPT = 1000;

/** Last index per list file: read from the file once, then kept current under the session's chain. */
const lastIndexes = new LRUCache<string, number>({ max: LAST_INDEXES_KEPT });

/** How many lists' last indexes are held now (for tests). */
export function listsCached(): number {
  return lastIndexes.size;
}

/**
 * Items of a `.jsonl` list sorted by index. A last line without its newline (a write cut short by a
 * crash: never an acknowledged one, each is synced whole with its newline) is not an item: `torn`
 * says there is one, `complete` is the byte length of the whole lines. A whole line that is not an
 * item (damaged on disk, edited by hand) held an acknowledged one: INTERNAL naming the file and
 * line (logged), never an item dropped in silence.
 */
export async function readList(
  path: string,
): Promise<{ items: ListItem[]; torn: boolean; complete: number }> {
  const text = (await readText(path)) ?? '';
  const end = text.lastIndexOf('\n') + 1;
  const items = new Map<number, unknown>();
  const lines = text.slice(0, end).split('\n');
  lines.pop(); // what follows the last newline: the torn line, or nothing
  lines.forEach((line, n) => {
    if (!line.trim()) return; // a blank line held nothing (one edited by hand)
    const item = parseItem(line);
    if (!item) {
      throw damagedFile(
        path,
        `line ${n + 1} (not a list item)`,
        `line ${n + 1} is not a list item`,
      );
    }
    if (!items.has(item.index)) items.set(item.index, item.value);
  });
  const sorted = [...items].sort(([a], [b]) => a - b).map(([index, value]) => ({ index, value }));
  return {
    items: sorted,
    torn: end < text.length,
    complete: Buffer.byteLength(text.slice(0, end)),
  };
}

/**
 * Appends one `{"index":n,"value":…}` line (`json` is the value's JSON) at `explicit` (CONFLICT if
 * taken) or at the last index + 1, and returns the index. Only under the session's write chain.
 */
export async function appendItem(path: string, json: string, explicit?: number): Promise<number> {
  const last = await lastIndex(path);
  const index = explicit ?? last + 1;
  if (index <= last && (await readList(path)).items.some((item) => item.index === index)) {
    throw indexTaken(index);
  }
  try {
    // Durable before it is acknowledged: the line synced (fdatasync), and the directory too when
    // this is the list's first line (the file may be new: its entry is the directory's).
    const file = await open(path, 'a', 0o600);
    try {
      await file.appendFile(`{"index":${index},"value":${json}}\n`, 'utf8');
      await file.datasync();
    } finally {
      await file.close();
    }
    if (last === 0) await syncDir(dirname(path));
  } catch (err) {
    lastIndexes.delete(path); // the file may end in a torn line now: re-read and repair it next time
    throw err;
  }
  lastIndexes.set(path, Math.max(last, index));
  return index;
}

/** Drops what is cached about a list file, or about every list of a session directory. */
export function forgetLists(path: string, wholeDirectory = false): void {
  lastIndexes.delete(path);
  if (!wholeDirectory) return;
  for (const file of [...lastIndexes.keys()])
    if (file.startsWith(path + sep)) lastIndexes.delete(file);
}

async function lastIndex(path: string): Promise<number> {
  const cached = lastIndexes.get(path);
  if (cached !== undefined) return cached;
  const { items, torn, complete } = await readList(path);
  if (torn) await truncate(path, complete); // the next line must not be glued to a torn one
  const last = items.at(-1)?.index ?? 0;
  lastIndexes.set(path, last);
  return last;
}

/** The `{"index":n,"value":…}` of one line, or null when it is not one. */
function parseItem(line: string): ListItem | null {
  try {
    const item = JSON.parse(line) as Partial<ListItem> | null;
    return item && Number.isSafeInteger(item.index) && 'value' in item ? (item as ListItem) : null;
  } catch {
    return null;
  }
}
