import { LoomError } from '@loom/session';
import {
  assertJsonBody,
  jsonNestingDepth,
  jsonValueCount,
  MAX_JSON_DEPTH,
  MAX_JSON_VALUES,
} from './json-depth';

const nested = (n: number) => '['.repeat(n) + ']'.repeat(n);

describe('jsonNestingDepth', () => {
  it('counts objects and arrays, not scalars', () => {
    expect(jsonNestingDepth('1')).toBe(0);
    expect(jsonNestingDepth('"x"')).toBe(0);
    expect(jsonNestingDepth('{}')).toBe(1);
    expect(jsonNestingDepth('{"a":[{"b":1}],"c":{}}')).toBe(3);
    expect(jsonNestingDepth(nested(40))).toBe(40);
  });

  it('ignores brackets inside strings, escaped quotes included', () => {
    expect(jsonNestingDepth('{"content":"[[[[{{{{"}')).toBe(1);
    expect(jsonNestingDepth('{"a":"say \\"[[[\\" and \\\\","b":[1]}')).toBe(2);
  });

  it('stops early once past the bound', () => {
    expect(jsonNestingDepth(nested(100_000), 32)).toBe(33);
  });
});

describe('assertJsonBody: depth', () => {
  it('accepts the bound and rejects one more, as VALIDATION_FAILED', () => {
    expect(() => assertJsonBody(nested(MAX_JSON_DEPTH))).not.toThrow();
    let err: unknown;
    try {
      assertJsonBody(nested(MAX_JSON_DEPTH + 1));
    } catch (e) {
      err = e;
    }
    expect(LoomError.is(err)).toBe(true);
    expect((err as LoomError).code).toBe('VALIDATION_FAILED');
  });

  it('answers a body both too deep and of too many values as too deep', () => {
    const both = `{"a":[${Array(MAX_JSON_VALUES).fill(0).join(',')}],"b":${nested(MAX_JSON_DEPTH + 1)}}`;
    expect(() => assertJsonBody(both)).toThrow(
      expect.objectContaining({ code: 'VALIDATION_FAILED' }),
    );
  });
});

describe('jsonValueCount', () => {
  it('bounds the values from above, brackets and commas inside strings aside', () => {
    expect(jsonValueCount('1')).toBe(1);
    expect(jsonValueCount('{"content":"a, [b], {c}"}')).toBe(2);
    expect(jsonValueCount('{"a":[1,2,{"b":"\\",","c":3}]}')).toBeGreaterThanOrEqual(7);
    expect(jsonValueCount('[' + '0,'.repeat(99_999) + '0]')).toBe(100_001); // the array too
  });
});

describe('assertJsonBody: values', () => {
  it('takes the densest 16 KB of metadata and refuses more values as PAYLOAD_TOO_LARGE', () => {
    const metadata = `[${Array(8_191).fill(0).join(',')}]`;
    expect(Buffer.byteLength(metadata)).toBeLessThanOrEqual(16 * 1024);
    expect(() => assertJsonBody(`{"metadata":{"a":${metadata}}}`)).not.toThrow();
    const keys = Array.from({ length: MAX_JSON_VALUES }, (_, i) => `"k${i}":1`).join(',');
    expect(() => assertJsonBody(`{${keys}}`)).toThrow(
      expect.objectContaining({ code: 'PAYLOAD_TOO_LARGE' }),
    );
  });
});

describe('jsonValueCount of empty objects and arrays', () => {
  // Metadata of empty arrays or objects within its 16 KB holds about 5,500 values; counting
  // each '[' as a value besides the commas made it about 11,000, and the body 413.
  it('counts an empty object or array as the one value it is', () => {
    expect(jsonValueCount('[]')).toBe(1);
    expect(jsonValueCount('{ }')).toBe(1);
    expect(jsonValueCount('[[],{},[ ]]')).toBe(4);
    expect(jsonValueCount('{"a":[1,2,{"b":"\\",","c":3}]}')).toBe(7);
    expect(jsonValueCount(JSON.stringify({ a: [[], {}, [1], { b: [] }] }))).toBe(8);
  });

  it('takes 16 KB of metadata made of empty arrays or objects', () => {
    for (const empty of ['[]', '{}']) {
      const metadata = `{"a":[${Array(5_400).fill(empty).join(',')}]}`;
      expect(Buffer.byteLength(JSON.stringify(JSON.parse(metadata)))).toBeLessThanOrEqual(
        16 * 1024,
      );
      expect(() => assertJsonBody(`{"metadata":${metadata}}`)).not.toThrow();
    }
  });
});
