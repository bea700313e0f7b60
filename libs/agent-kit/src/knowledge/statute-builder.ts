import type { LocalizedText, Statute, StatuteDomain } from './statute.types';

const DIGITS = ['零', '一', '二', '三', '四', '五', '六', '七', '八', '九'];

/** 23 → 二十三, 509 → 五百零九, 610 → 六百一十 (1–999, as articles are numbered in Chinese law). */
export function chineseNumeral(n: number): string {
  if (!Number.isInteger(n) || n < 1 || n > 999) throw new RangeError(`unsupported numeral ${n}`);
  const hundreds = Math.floor(n / 100);
  const tens = Math.floor((n % 100) / 10);
  const ones = n % 10;
  const onesText = ones ? DIGITS[ones] : '';
  if (!hundreds) {
    if (!tens) return onesText;
    return `${tens === 1 ? '' : DIGITS[tens]}十${onesText}`;
  }
  const head = `${DIGITS[hundreds]}百`;
  if (!tens) return ones ? `${head}零${onesText}` : head;
  return `${head}${DIGITS[tens]}十${onesText}`;
}

export interface ArticleSpec {
  article: number;
  summary: LocalizedText;
  /** Keywords separated by `|` (English keywords may contain spaces). */
  keywords: string;
  domain: StatuteDomain;
}

/** Builds the entries of one law, deriving ids and citation titles from the article numbers. */
export function articlesOf(idPrefix: string, law: LocalizedText, specs: ArticleSpec[]): Statute[] {
  return specs.map((spec) => ({
    id: `${idPrefix}-${spec.article}`,
    law,
    article: spec.article,
    title: {
      zh: `《${law.zh}》第${chineseNumeral(spec.article)}条`,
      en: `${law.en}, Article ${spec.article}`,
    },
    summary: spec.summary,
    keywords: spec.keywords.split('|').map((keyword) => keyword.trim()),
    domain: spec.domain,
  }));
}
