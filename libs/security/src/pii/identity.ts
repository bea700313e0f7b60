import { ssnValid } from './checksums';
import type { Detector, PiiSpan } from './types';

const SSN_DASHED = /(?<![\w.-])(\d{3})-(\d{2})-(\d{4})(?![\w]|-\d)/g;
// Undashed or spaced SSNs only right after an SSN keyword.
const SSN_KEYED =
  /(?:\bSSN|\bsocial security(?: (?:number|no\.?))?|社会安全号码?)[\s#:：=is]{0,6}(\d{3}) ?(\d{2}) ?(\d{4})(?![\w])/dgi;

const PASSPORT_KEY = /passport|护照/gi;
const PASSPORT_WINDOW = 40;
// Letter-led numbers (E12345678, EA1234567, K12345678, X1234567) or 9 digits (US).
const PASSPORT_VALUE = /(?<![A-Za-z0-9])(?:[A-Z]{1,2}\d{6,9}|\d{9})(?![A-Za-z0-9])/g;

function detectSsn(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const m of text.matchAll(SSN_DASHED)) {
    if (ssnValid(m[1], m[2], m[3])) {
      spans.push({ type: 'SSN', start: m.index ?? 0, end: (m.index ?? 0) + m[0].length });
    }
  }
  for (const m of text.matchAll(SSN_KEYED)) {
    const [start] = m.indices?.[1] ?? [0];
    const [, end] = m.indices?.[3] ?? [0, 0];
    if (ssnValid(m[1], m[2], m[3])) spans.push({ type: 'SSN', start, end });
  }
  return spans;
}

function detectPassport(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const key of text.matchAll(PASSPORT_KEY)) {
    const from = (key.index ?? 0) + key[0].length;
    // Look a little past the window so a long token is not cut into a valid-looking prefix.
    const window = text.slice(from, from + PASSPORT_WINDOW + 12);
    for (const m of window.matchAll(PASSPORT_VALUE)) {
      const at = m.index ?? 0;
      if (at >= PASSPORT_WINDOW) break;
      spans.push({ type: 'PASSPORT', start: from + at, end: from + at + m[0].length });
      break;
    }
  }
  return spans;
}

/** US social security numbers: ddd-dd-dddd anywhere, undashed only after "SSN"; SSA invalid ranges rejected. */
export const ssnDetector: Detector = { types: ['SSN'], detect: detectSsn };

/** Passport numbers, context-led: within 40 characters after "passport" or "护照". */
export const passportDetector: Detector = { types: ['PASSPORT'], detect: detectPassport };
