import {
  findKeyword,
  hasCjk,
  KEYWORD_PATTERNS_KEPT,
  keywordPatternsCached,
  matchedKeywords,
} from './keyword-match';

describe('keyword matching', () => {
  it('matches CJK keywords as substrings', () => {
    expect(findKeyword('我跟公司签的劳动合同有问题', '合同')).toEqual([
      { keyword: '合同', start: 8, end: 10 },
    ]);
    expect(matchedKeywords('租房合同押金不退', ['押金', '工资', '押金'])).toEqual(['押金']);
  });

  it('matches English keywords as whole words, case-insensitively, with simple endings', () => {
    expect(findKeyword('My Contracts are void', 'contract')).toHaveLength(1);
    expect(findKeyword('contractor', 'contract')).toHaveLength(0);
    expect(findKeyword('is it fair?', 'it')).toHaveLength(1);
    expect(findKeyword('an item', 'it')).toHaveLength(0);
    expect(findKeyword('the noncompete and the non compete', 'non-compete')).toHaveLength(2);
    expect(findKeyword('我的contract有问题', 'contract')).toHaveLength(1);
  });

  it('treats regex characters literally and ignores blank keywords', () => {
    expect(findKeyword('N+1 compensation', 'n+1')).toHaveLength(1);
    expect(findKeyword('anything', '  ')).toEqual([]);
  });

  it('matches nothing for a keyword of dashes alone (no word in it), not every message', () => {
    // `--keywords "tax, -"`: a descriptor may list it; it must not route every question there.
    expect(findKeyword('what is the notice period?', '-')).toEqual([]);
    expect(findKeyword('a - b', ' - - ')).toEqual([]);
    expect(matchedKeywords('what is the notice period?', ['-', 'tax'])).toEqual([]);
  });

  it('detects CJK text', () => {
    expect(hasCjk('劳动')).toBe(true);
    expect(hasCjk('labour')).toBe(false);
  });
});

describe('keyword patterns kept in memory', () => {
  it('stays bounded however many distinct keywords the agents ever registered', () => {
    // Keywords come from the registered descriptors: every deploy that changes them, over weeks
    // of rolling out new versions, brings new ones, and the old are never matched again.
    for (let i = 0; i < KEYWORD_PATTERNS_KEPT + 2000; i++)
      findKeyword('the lease of flat 9', `keyword-${i}`);
    expect(keywordPatternsCached()).toBeLessThanOrEqual(KEYWORD_PATTERNS_KEPT);
    // A keyword in use keeps matching as before.
    expect(findKeyword('the lease of flat 9', 'lease')).toEqual([
      { keyword: 'lease', start: 4, end: 9 },
    ]);
  });
});
