import { isIPv6 } from 'net';
import { ipv4Valid, nanpValid } from './checksums';
import { afterVersionKeyword, looksLikeAmount } from './context';
import { urlPasswordRanges } from './secrets';
import type { Detector, PiiSpan } from './types';

// Bounded quantifiers everywhere: local part ≤ 64, labels ≤ 63, at most 8 labels.
// The second look-behind leaves the password of scheme://user:password@host to the credential detector.
const EMAIL =
  /(?<![\w.%+-])(?<!:\/\/[^\s/@:]{0,64}:)[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}(?![A-Za-z0-9-]|\.[A-Za-z0-9])/g;

// "+" then digit groups joined by single separators; one optional "(area)" right after the country
// code, or the trunk prefix in brackets with the area code right after it: +86 (0)10 6234 5678.
const INTL_PHONE =
  /(?<![\w+])\+\d{1,15}(?:[ .-]?\(\d{1,5}\)(?:(?<=\(0\))\d{1,4})?)?(?:[ .-]\d{1,8}){0,6}/g;
const US_PHONE =
  /(?<![\w+.-])(?:\+?1[ .-]?)?(?:\((\d{3})\)[ .-]?|(\d{3})[ .-])(\d{3})[ .-]\d{4}(?![\w]|[.-]\d)/g;
// A mainland landline with its area code in brackets (full-width too): （010）62345678,
// (021) 6234 5678, (0755)888-8888. The local number is 7 or 8 digits, not starting with 0 or 1.
const CN_LANDLINE_BRACKETED =
  /(?<![\w(（])[(（]0[1-9]\d{1,2}[)）][ \t]?[2-9]\d{2,3}[ -]?\d{4}(?![\w]|[.-]\d)/g;

const OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
// Not inside a longer dotted run: 1.2.3.4.5 and v1.2.3.4 stay untouched.
const IPV4 = new RegExp(`(?<![\\w.])${OCTET}(?:\\.${OCTET}){3}(?![\\w]|\\.\\d)`, 'g');
const IPV6_CANDIDATE =
  /(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?![\w:]|\.\d)/g;

function detectEmail(text: string): PiiSpan[] {
  // `pa ss@db.example.com` in scheme://user:pa ss@db.example.com is a password and a host.
  const passwords = urlPasswordRanges(text);
  return [...text.matchAll(EMAIL)]
    .filter((m) => !passwords.some(([s, e]) => m.index >= s && m.index < e))
    .map((m) => ({ type: 'EMAIL' as const, start: m.index, end: m.index + m[0].length }));
}

function detectPhone(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const m of text.matchAll(INTL_PHONE)) {
    const start = m.index ?? 0;
    let value = m[0];
    // Drop trailing groups until the number fits E.164 (≤ 15 digits).
    while (value.replace(/\D/g, '').length > 15 && /[ .-]\d+$/.test(value)) {
      value = value.replace(/[ .-]\d+$/, '');
    }
    const digits = value.replace(/\D/g, '').length;
    const grouped = /[ .()-]/.test(value);
    const next = text.slice(start + value.length, start + value.length + 2);
    if (digits > 15 || digits < (grouped ? 8 : 10) || /^(?:[A-Za-z_]|[.-]?\d)/.test(next)) continue;
    if (looksLikeAmount(text, start, start + value.length)) continue;
    spans.push({ type: 'PHONE', start, end: start + value.length });
  }
  for (const m of text.matchAll(CN_LANDLINE_BRACKETED))
    spans.push({ type: 'PHONE', start: m.index ?? 0, end: (m.index ?? 0) + m[0].length });
  for (const m of text.matchAll(US_PHONE)) {
    if (!nanpValid(m[1] ?? m[2], m[3])) continue;
    spans.push({ type: 'PHONE', start: m.index ?? 0, end: (m.index ?? 0) + m[0].length });
  }
  return spans;
}

// Node's words for a socket that failed, before the address it names: `connect ECONNREFUSED `,
// `listen EADDRINUSE: address already in use `. ioredis and mysql2 pass them on as they are.
const SOCKET_ERROR_BEFORE =
  /\b(?:connect|bind|listen|send|read|write|accept)[ ]E[A-Z]{3,20}(?::[ A-Za-z]{1,40})?[ ]$/;

/**
 * True for the server address in a socket error's own words (`connect ECONNREFUSED
 * 127.0.0.1:6379`): a server Loom connects to, which an operator needs to see, not a user's
 * address. An IPv4 address needs its `:port` after it (an IPv6 one has taken it in).
 */
function socketErrorAddress(text: string, start: number, end: number, v4: boolean): boolean {
  if (v4 && !/^:\d{1,5}(?!\d)/.test(text.slice(end, end + 6))) return false;
  return SOCKET_ERROR_BEFORE.test(text.slice(Math.max(0, start - 72), start));
}

function detectIp(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const m of text.matchAll(IPV4)) {
    const start = m.index ?? 0;
    if (socketErrorAddress(text, start, start + m[0].length, true)) continue;
    if (ipv4Valid(m[0]) && !afterVersionKeyword(text, start)) {
      spans.push({ type: 'IP', start, end: start + m[0].length });
    }
  }
  for (const m of text.matchAll(IPV6_CANDIDATE)) {
    const start = m.index ?? 0;
    if (socketErrorAddress(text, start, start + m[0].length, false)) continue;
    if (/[0-9A-Fa-f]/.test(m[0]) && isIPv6(m[0]))
      spans.push({ type: 'IP', start, end: start + m[0].length });
  }
  return spans;
}

/** Email addresses (RFC 5321 shapes with a real TLD). */
export const emailDetector: Detector = { types: ['EMAIL'], detect: detectEmail };

/** International "+CC …" numbers (8-15 digits) and NANP numbers written (415) 555-2671 / 415-555-2671. */
export const phoneDetector: Detector = { types: ['PHONE'], detect: detectPhone };

/** IPv4 dotted quads (0-255, no leading zeros, not versions) and IPv6 addresses validated by node:net; not a socket error's server address. */
export const ipDetector: Detector = { types: ['IP'], detect: detectIp };
