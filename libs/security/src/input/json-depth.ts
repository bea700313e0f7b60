import { LoomError, LoomErrorCode } from '@loom/session';

/** Deepest JSON nesting accepted in a request body (objects and arrays count one level each). */
export const MAX_JSON_DEPTH = 32;

/** The nesting depth and the number of values of a JSON text (see jsonShape). */
export interface JsonShape {
  depth: number;
  values: number;
}

/**
 * One pass over a JSON text without parsing it (so a hostile `[[[[…` never reaches JSON.parse's
 * recursion), brackets and commas inside strings not counted:
 * - `depth`: the deepest nesting (objects and arrays count one level each); the scan stops as
 *   soon as it exceeds `stopDepthAbove`, so a body costs one pass at most;
 * - `values`: objects, arrays and every member or element: one, plus the commas, plus the
 *   objects and arrays that hold something (the first element of each). An empty `[]` or `{}` is
 *   one value, not two: 16 KB of metadata made of them holds about 5,500, well within the bound.
 */
export function jsonShape(text: string, stopDepthAbove = Infinity): JsonShape {
  let depth = 0;
  let max = 0;
  let values = 1;
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
    const closing = c === 0x7d /* } */ || c === 0x5d; /* ] */
    if (opened) {
      opened = false;
      if (!closing) values++;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x2c /* , */) values++;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      opened = true;
      if (++depth > max) {
        max = depth;
        if (max > stopDepthAbove) break;
      }
    } else if (closing) depth = Math.max(0, depth - 1);
  }
  return { depth: max, values };
}

/** The nesting depth of a JSON text (jsonShape), no further than past `stopAbove`. */
export function jsonNestingDepth(text: string, stopAbove = Infinity): number {
  return jsonShape(text, stopAbove).depth;
}

/**
 * Most JSON values a request body may hold. A body the API accepts holds a few (content is one
 * string); 16 KB of metadata holds at most about 8,200 (`[0,0,…]`). Past it, the ValidationPipe's
 * walk of the parsed body (class-transformer, the whitelist) held the event loop for about 300 ms
 * per 250 KB request, only to refuse it.
 */
export const MAX_JSON_VALUES = 10_000;

/** The values of a JSON text (jsonShape). */
export function jsonValueCount(text: string): number {
  return jsonShape(text).values;
}

/**
 * A request body's JSON text, checked in one pass before it is parsed: nesting deeper than
 * `maxDepth` is VALIDATION_FAILED, more than `maxValues` values PAYLOAD_TOO_LARGE.
 */
export function assertJsonBody(
  text: string,
  maxDepth = MAX_JSON_DEPTH,
  maxValues = MAX_JSON_VALUES,
): void {
  const shape = jsonShape(text, maxDepth);
  if (shape.depth > maxDepth) throw tooDeep(maxDepth);
  if (shape.values > maxValues) throw tooManyValues(maxValues);
}

function tooDeep(maxDepth: number): LoomError {
  return new LoomError(
    LoomErrorCode.VALIDATION_FAILED,
    `JSON body nests deeper than ${maxDepth} levels`,
  );
}

function tooManyValues(maxValues: number): LoomError {
  return new LoomError(
    LoomErrorCode.PAYLOAD_TOO_LARGE,
    `the body holds more than ${maxValues} JSON values`,
  );
}
