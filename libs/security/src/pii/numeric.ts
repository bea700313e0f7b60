import { cardNetwork, cnIdValid, isRealDate, luhnValid } from './checksums';
import { hasBankContext, looksLikeAmount, nearestContext } from './context';
import type { Detector, PiiSpan, PiiType } from './types';

/*
 * One pass over digit runs ("4532 0151 1283 0366", "138-0013-8000", "11010519491231002X") serves
 * every bare-number family. A run is split into groups at single spaces or hyphens; candidate values
 * are windows of whole groups, so a number is never cut out of the middle of a longer one.
 */
const RUN = /\d+(?:[ -]\d+)*(?:[Xx](?![A-Za-z0-9_]))?/g;
const MAX_WINDOW_DIGITS = 19;
const WORD = /[A-Za-z0-9_]/;
const LETTER = /[A-Za-z_]/;
// The mainland's area codes: 010 (Beijing), 020-029, and the four-digit 03XX-09XX.
const CN_AREA_CODE = /^0(?:10|2\d|[3-9]\d{2})$/;

/** True for eight digits that are a real date, 19000101 to 20991231 (a YYYYMMDD stamp). */
function readsAsDate(digits: string): boolean {
  const m = /^(19\d\d|20\d\d)(\d\d)(\d\d)$/.exec(digits);
  return !!m && isRealDate(Number(m[1]), Number(m[2]), Number(m[3]));
}

interface Group {
  start: number;
  end: number;
  text: string;
}

function splitGroups(run: string, offset: number): Group[] {
  const groups: Group[] = [];
  const re = /[\dXx]+/g;
  for (const m of run.matchAll(re)) {
    const start = offset + (m.index ?? 0);
    groups.push({ start, end: start + m[0].length, text: m[0] });
  }
  return groups;
}

function sameSeparators(text: string, groups: Group[], i: number, j: number): boolean {
  for (let k = i + 1; k <= j; k++)
    if (text[groups[k].start - 1] !== text[groups[i + 1].start - 1]) return false;
  return true;
}

// Classifies the window groups[i..j] (digits `value`, group lengths `sizes`) or returns null.
function classify(
  text: string,
  groups: Group[],
  i: number,
  j: number,
  value: string,
  sizes: string,
): PiiType | null {
  const consistent = sameSeparators(text, groups, i, j);
  const start = groups[i].start;
  if (
    value.length === 18 &&
    (sizes === '18' || (sizes === '6,8,4' && consistent)) &&
    cnIdValid(value)
  ) {
    return 'CN_ID';
  }
  if (!/^\d+$/.test(value)) return null;
  let type: PiiType | null = null;
  if (value.length >= 13 && consistent && luhnValid(value)) {
    const lens = sizes.split(',').map(Number);
    if (lens.length === 1 || (lens[0] === 4 && lens.every((n) => n >= 3 && n <= 6))) {
      const network = cardNetwork(value);
      if (network === 'UNIONPAY') type = 'BANK_CARD';
      else if (network === 'INTERNATIONAL') type = 'CARD';
      else if (value.length >= 16 && hasBankContext(text, start)) type = 'BANK_CARD';
    }
  }
  if (!type && /^(?:0086)?1[3-9]\d{9}$/.test(value) && /^(?:4,)?(?:11|3,4,4)$/.test(sizes))
    type = 'PHONE';
  // Mainland landline with area code: 010-62345678, 010 62345678, 0755-8888888, 021 6234 5678,
  // 0755-8888 6666. Only real area codes (010 and 02X take an 8-digit number, 03XX-09XX one of 7
  // or 8); after a bare space, not a number that reads as a date (0520 20240520).
  if (!type && j > i && j <= i + 2 && CN_AREA_CODE.test(groups[i].text)) {
    const local = value.slice(groups[i].text.length);
    const sep = text[groups[i + 1].start - 1];
    const split = j === i + 2 && groups[j].text.length === 4 && text[groups[j].start - 1] !== '-';
    const digits = groups[i].text.length === 3 ? /^[2-9]\d{7}$/ : /^[2-9]\d{6,7}$/;
    const joined = sep === '-' || (sep === ' ' && !readsAsDate(local));
    if (digits.test(local) && (j === i + 1 ? joined : split)) type = 'PHONE';
  }
  return type && nearestContext(text, start) !== 'negative' ? type : null;
}

// Where a run may start and end a window, given what touches it (letters, "+", decimal points).
function allowedRange(
  text: string,
  start: number,
  end: number,
  count: number,
): [number, number] | null {
  const p1 = text[start - 1] ?? '';
  const p2 = text[start - 2] ?? '';
  const n1 = text[end] ?? '';
  const n2 = text[end + 1] ?? '';
  if (LETTER.test(p1) || (p1 !== '' && '-_#'.includes(p1) && WORD.test(p2))) return null;
  if (p1 === '/' && /\d/.test(p2)) return null;
  let first = 0;
  let last = count - 1;
  if (p1 === '+' || (p1 !== '' && '.,:'.includes(p1) && /\d/.test(p2))) first = 1;
  if (LETTER.test(n1) || (n1 !== '' && '-_'.includes(n1) && WORD.test(n2))) last = count - 2;
  if (n1 !== '' && '.,:/'.includes(n1) && /\d/.test(n2)) last = count - 2;
  return first <= last ? [first, last] : null;
}

function detectNumeric(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const m of text.matchAll(RUN)) {
    const runStart = m.index ?? 0;
    const runEnd = runStart + m[0].length;
    if (runEnd - runStart < 10 && !m[0].includes('-')) continue; // nothing this short qualifies
    const groups = splitGroups(m[0], runStart);
    const range = allowedRange(text, runStart, runEnd, groups.length);
    if (!range) continue;
    const [first, last] = range;
    for (let i = first; i <= last;) {
      // Every family's first group is 3, 4 or 6 digits long when it has more than one group, and
      // a one-group value needs 10 digits: any other start matches nothing (and a run of short
      // groups, "1 1 1 …", would otherwise cost every window of it).
      const lead = groups[i].text.length;
      if (lead < 10 && lead !== 3 && lead !== 4 && lead !== 6) {
        i++;
        continue;
      }
      let best: { j: number; type: PiiType } | null = null;
      let value = '';
      let sizes = '';
      for (let j = i; j <= last; j++) {
        value += groups[j].text;
        sizes += j === i ? `${groups[j].text.length}` : `,${groups[j].text.length}`;
        if (value.length > MAX_WINDOW_DIGITS) break;
        if (value.length < 10) continue;
        const type = classify(text, groups, i, j, value, sizes);
        if (type) best = { j, type };
      }
      if (best && !looksLikeAmount(text, groups[i].start, groups[best.j].end)) {
        spans.push({ type: best.type, start: groups[i].start, end: groups[best.j].end });
        i = best.j + 1;
      } else {
        i++;
      }
    }
  }
  return spans;
}

/** Bare-number families: resident ids, payment and bank cards, mainland mobile and landline numbers. */
export const numericDetector: Detector = {
  types: ['CN_ID', 'CARD', 'BANK_CARD', 'PHONE'],
  detect: detectNumeric,
};
