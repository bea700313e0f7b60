import { chineseNumeral } from './statute-builder';
import { STATUTES, getStatute, searchStatutes } from './statutes';

const titles = (query: string, opts?: Parameters<typeof searchStatutes>[1]) =>
  searchStatutes(query, opts).map((statute) => statute.title.zh);

describe('statute corpus', () => {
  it('has about twenty well-formed entries with unique ids', () => {
    expect(STATUTES.length).toBeGreaterThanOrEqual(18);
    expect(new Set(STATUTES.map((s) => s.id)).size).toBe(STATUTES.length);
    for (const statute of STATUTES) {
      expect(statute.summary.zh).toMatch(/[\u4e00-\u9fff]/);
      expect(statute.summary.en).toMatch(/^[\x20-\x7e’]+$/);
      expect(statute.keywords.length).toBeGreaterThan(0);
    }
  });

  it('derives citation titles from article numbers', () => {
    expect(getStatute('labor-contract-law-23')?.title).toEqual({
      zh: '《劳动合同法》第二十三条',
      en: 'Labor Contract Law, Article 23',
    });
    expect(getStatute('civil-code-509')?.title.zh).toBe('《民法典》第五百零九条');
    expect(getStatute('civil-code-703')?.title.zh).toBe('《民法典》第七百零三条');
    expect(getStatute('labor-contract-law-10')?.title.zh).toBe('《劳动合同法》第十条');
  });

  it.each([
    [10, '十'],
    [19, '十九'],
    [82, '八十二'],
    [110, '一百一十'],
    [509, '五百零九'],
    [610, '六百一十'],
    [985, '九百八十五'],
  ])('writes %i as %s', (n, text) => expect(chineseNumeral(n)).toBe(text));
});

describe('searchStatutes', () => {
  it('finds the non-compete articles for the demo follow-up, in both languages', () => {
    expect(titles('上面那份合同里关于竞业协议的部分怎么看?').slice(0, 2)).toEqual([
      '《劳动合同法》第二十三条',
      '《劳动合同法》第二十四条',
    ]);
    expect(titles('What about the non-compete clause in that contract?').slice(0, 2)).toEqual([
      '《劳动合同法》第二十三条',
      '《劳动合同法》第二十四条',
    ]);
  });

  it('finds labour-contract articles for the first demo question', () => {
    expect(titles('我跟公司签的劳动合同有问题')).toContain('《劳动合同法》第十条');
    expect(titles('My employment contract with my company has a problem')).toContain(
      '《劳动合同法》第十条',
    );
  });

  it('ranks by keyword overlap: more hits first', () => {
    const [first] = searchStatutes('公司一直没签书面劳动合同,能要双倍工资吗');
    expect(first.id).toBe('labor-contract-law-82');
  });

  it('answers lease and sale questions from the civil code', () => {
    expect(titles('租房合同押金不退怎么办')).toEqual(
      expect.arrayContaining(['《民法典》第七百零三条', '《民法典》第九百八十五条']),
    );
    expect(titles('I bought a car and the purchase contract was breached')).toEqual(
      expect.arrayContaining(['《民法典》第五百九十五条', '《民法典》第五百七十七条']),
    );
  });

  it('filters by domain and limits the result', () => {
    const labor = searchStatutes('违约金 竞业限制', { domain: 'labor' });
    expect(labor.every((s) => s.domain === 'labor')).toBe(true);
    expect(searchStatutes('违约金 竞业限制', { domain: ['contract', 'general'] })[0].id).toBe(
      'civil-code-585',
    );
    expect(searchStatutes('劳动合同 辞退 经济补偿 竞业', { limit: 2 })).toHaveLength(2);
  });

  it('is deterministic and returns nothing for unrelated text', () => {
    expect(titles('经济补偿怎么算')).toEqual(titles('经济补偿怎么算'));
    expect(searchStatutes('今天天气不错')).toEqual([]);
    expect(searchStatutes('')).toEqual([]);
  });
});
