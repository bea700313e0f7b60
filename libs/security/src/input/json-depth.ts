import { LoomError, LoomErrorCode } from '@loom/session';

/** Deepest JSON nesting accepted in a request body (objects and arrays count one level each). */
export const MAX_JSON_DEPTH = 32;

/**
 * The nesting depth of a JSON text, scanned without parsing it (so a hostile `[[[[…` never
 * reaches JSON.parse's recursion). Brackets inside strings do not count. Stops counting once
 * `stopAbove` is exceeded, so a body costs one pass at most.
 */
export function jsonNestingDepth(text: string, stopAbove = Infinity): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      depth++;
      if (depth > max) {
        max = depth;
        if (max > stopAbove) return max;
      }
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth = Math.max(0, depth - 1);
  }
  return max;
}

/** VALIDATION_FAILED when `text` nests deeper than `maxDepth`. */
export function assertJsonDepth(text: string, maxDepth = MAX_JSON_DEPTH): void {
  if (jsonNestingDepth(text, maxDepth) > maxDepth) {
    throw new LoomError(
      LoomErrorCode.VALIDATION_FAILED,
      `JSON body nests deeper than ${maxDepth} levels`,
    );
  }
}

/**
 * Most JSON values a request body may hold. A body the API accepts holds a few (content is one
 * string); 16 KB of metadata holds at most about 8,200 (`[0,0,…]`). Past it, the ValidationPipe's
 * walk of the parsed body (class-transformer, the whitelist) held the event loop for about 300 ms
 * per 250 KB request, only to refuse it.
 */
export const MAX_JSON_VALUES = 10_000;

/**
 * The values of a JSON text (objects, arrays and every member or element): one, plus its commas
 * outside strings, plus its objects and arrays that hold something (the first element of each).
 * An empty `[]` or `{}` is one value, not two: 16 KB of metadata made of them holds about 5,500
 * values, well within the bound. Scanned without parsing, and no further than past `stopAbove`.
 */
export function jsonValueCount(text: string, stopAbove = Infinity): number {
  let count = 1;
  let inString = false;
  // An object or array was opened and its first element (or its end) is still to come.
  let opened = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
      continue;
    }
    if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) continue;
    if (opened) {
      opened = false;
      if (c !== 0x5d /* ] */ && c !== 0x7d /* } */ && ++count > stopAbove) return count;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x2c /* , */) {
      if (++count > stopAbove) return count;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) opened = true;
  }
  return count;
}

/** PAYLOAD_TOO_LARGE when `text` may hold more than `maxValues` JSON values. */
export function assertJsonValues(text: string, maxValues = MAX_JSON_VALUES): void {
  if (jsonValueCount(text, maxValues) > maxValues) {
    throw new LoomError(
      LoomErrorCode.PAYLOAD_TOO_LARGE,
      `the body holds more than ${maxValues} JSON values`,
    );
  }
}
