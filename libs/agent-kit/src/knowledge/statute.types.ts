export type StatuteDomain = 'labor' | 'contract' | 'general';

export interface LocalizedText {
  zh: string;
  en: string;
}

/** One article of a statute, summarized; `title` is the citation, e.g. 《劳动合同法》第二十三条. */
export interface Statute {
  id: string;
  law: LocalizedText;
  article: number;
  title: LocalizedText;
  summary: LocalizedText;
  keywords: string[];
  domain: StatuteDomain;
}
