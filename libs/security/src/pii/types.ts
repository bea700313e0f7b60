/** Every kind of personal or secret data the redactor knows. CARD is an international payment card; BANK_CARD a Chinese (UnionPay or bank-context) card. */
export const PII_TYPES = [
  'EMAIL',
  'PHONE',
  'CARD',
  'BANK_CARD',
  'CN_ID',
  'PASSPORT',
  'SSN',
  'IP',
  'API_KEY',
  'PASSWORD',
] as const;

export type PiiType = (typeof PII_TYPES)[number];

/** A detected value: `text.slice(start, end)` is what gets replaced. */
export interface PiiSpan {
  type: PiiType;
  start: number;
  end: number;
}

/** Tie-break between overlapping spans of equal length: lower wins (most specific first). */
export const TYPE_PRIORITY: Readonly<Record<PiiType, number>> = {
  API_KEY: 0,
  PASSWORD: 1,
  CN_ID: 2,
  BANK_CARD: 3,
  CARD: 4,
  SSN: 5,
  PASSPORT: 6,
  EMAIL: 7,
  IP: 8,
  PHONE: 9,
};

/** The text that replaces a span of `type`. */
export function placeholder(type: PiiType): string {
  return `[REDACTED_${type}]`;
}

/** A detector scans the whole text once and reports candidate spans; overlaps are resolved later. */
export interface Detector {
  readonly types: readonly PiiType[];
  detect(text: string): PiiSpan[];
}
