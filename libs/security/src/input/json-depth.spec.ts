import { LoomError } from '@loom/session';
import { assertJsonDepth, jsonNestingDepth, MAX_JSON_DEPTH } from './json-depth';

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

describe('assertJsonDepth', () => {
  it('accepts the bound and rejects one more, as VALIDATION_FAILED', () => {
    expect(() => assertJsonDepth(nested(MAX_JSON_DEPTH))).not.toThrow();
    let err: unknown;
    try {
      assertJsonDepth(nested(MAX_JSON_DEPTH + 1));
    } catch (e) {
      err = e;
    }
    expect(LoomError.is(err)).toBe(true);
    expect((err as LoomError).code).toBe('VALIDATION_FAILED');
  });
});
