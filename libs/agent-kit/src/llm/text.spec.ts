import { chunkText, detectLanguage, makeTitle, truncate } from './text';
import { countMessageTokens, countTokens } from './token-counter';

describe('text helpers', () => {
  it('detects the language of a message', () => {
    expect(detectLanguage('我跟公司签的劳动合同有问题')).toBe('zh');
    expect(detectLanguage('What about that contract?')).toBe('en');
    expect(detectLanguage('???', 'zh')).toBe('zh');
  });

  it('truncates on grapheme boundaries', () => {
    expect(truncate('👨‍👩‍👧‍👦'.repeat(5), 3)).toBe('👨‍👩‍👧‍👦👨‍👩‍👧‍👦…');
    expect(truncate('短', 3)).toBe('短');
    expect(truncate('劳动合同竞业限制问题咨询', 6)).toBe('劳动合同竞…');
    expect(Array.from(truncate('👩‍⚖️'.repeat(5), 3)).join('')).toBe('👩‍⚖️👩‍⚖️…');
  });

  // Segmenting a whole 32,000-character message into graphemes took about 150 ms of the event
  // loop, once per history message in every turn's model plan: only what is kept is segmented.
  it('segments no further into a long text than the graphemes it keeps', () => {
    const segment = Intl.Segmenter.prototype.segment;
    let read = 0;
    const spy = jest.spyOn(Intl.Segmenter.prototype, 'segment').mockImplementation(function (
      this: Intl.Segmenter,
      text: string,
    ) {
      const segments = segment.call(this, text);
      return {
        ...segments,
        *[Symbol.iterator]() {
          for (const s of segments) {
            read++;
            yield s;
          }
        },
      } as unknown as Intl.Segments;
    });
    try {
      expect(truncate('劳动合同'.repeat(8_000), 300)).toBe(
        `${'劳动合同'.repeat(75).slice(0, 299)}…`,
      );
      expect(truncate('x'.repeat(299) + '👨‍👩‍👧‍👦', 300)).toBe('x'.repeat(299) + '👨‍👩‍👧‍👦');
      expect(read).toBeLessThanOrEqual(2 * 301);
    } finally {
      spy.mockRestore();
    }
  });

  it('makes a title from the first sentence without trailing punctuation', () => {
    expect(makeTitle('租房合同押金不退怎么办?房东一直拖着。')).toBe('租房合同押金不退怎么办');
    expect(makeTitle('  My employment contract\nhas a problem.  ')).toBe(
      'My employment contract has a problem',
    );
  });

  it('chunks text without losing anything', () => {
    const text = '结合您前面提到的😀内容';
    expect(chunkText(text, 4).join('')).toBe(text);
    expect(chunkText('', 4)).toEqual([]);
  });
});

describe('token counter', () => {
  it('counts cl100k tokens, not characters', () => {
    expect(countTokens('hello world')).toBe(2);
    expect(countTokens('')).toBe(0);
    expect(countTokens('<|endoftext|>')).toBeGreaterThan(1);
  });

  it('adds the chat framing per message', () => {
    const messages = [{ role: 'user' as const, content: 'hello world' }];
    expect(countMessageTokens(messages)).toBe(3 + 1 + 2 + 3);
    expect(countMessageTokens([])).toBe(0);
  });
});
