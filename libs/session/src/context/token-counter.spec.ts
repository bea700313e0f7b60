import { encode } from 'gpt-tokenizer/cjs/encoding/cl100k_base';
import { countTokens, pieces } from './token-counter';

const exact = (text: string) => encode(text, { disallowedSpecial: new Set() }).length;

describe('countTokens', () => {
  it('counts normal text exactly as the tokenizer does, long or short', () => {
    const english =
      'The employer must give written notice thirty days in advance, or pay one month of wages instead. ';
    const chinese = '劳动合同的竞业限制条款最长不得超过二年, 用人单位应当按月给予经济补偿。 ';
    for (const text of [
      '',
      'hi',
      english,
      english.repeat(40),
      chinese.repeat(60),
      `${english}${chinese}`.repeat(30),
    ])
      expect(countTokens(text)).toBe(exact(text));
  });

  it('never hands the tokenizer more than 256 characters at once, cutting at spaces, whole characters', () => {
    const text = `${'word '.repeat(100)}${'寅'.repeat(600)}${'👍'.repeat(300)}`;
    const parts = [...pieces(text)];
    expect(parts.join('')).toBe(text);
    expect(Math.max(...parts.map((p) => p.length))).toBeLessThanOrEqual(256);
    expect(parts[1].startsWith(' ')).toBe(true); // the first cut fell before a space
    for (const p of parts) expect(p).not.toMatch(/^[\udc00-\udfff]|[\ud800-\udbff]$/);
  });

  it('counts 32,000-character runs without spaces piece by piece', () => {
    // One pre-token each: the tokenizer alone is quadratic on these (seconds to minutes).
    expect(countTokens('a'.repeat(32_000))).toBe(4000);
    expect(countTokens('寅'.repeat(32_000))).toBe(64_000);
    // 256 UTF-16 units a piece: 128 whole emoji each, never half of one.
    expect(countTokens('👍'.repeat(16_000))).toBe(exact('👍'.repeat(128)) * 125);
  });
});
