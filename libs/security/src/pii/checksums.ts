/** Luhn (mod 10) check over a string of digits; false for empty or non-digit input. */
export function luhnValid(digits: string): boolean {
  if (!/^\d{2,}$/.test(digits)) return false;
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

/** True when year/month/day name a real calendar day (Gregorian, leap years included). */
export function isRealDate(year: number, month: number, day: number): boolean {
  if (month < 1 || month > 12 || day < 1) return false;
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  return day <= days[month - 1];
}

const CN_ID_WEIGHTS = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
const CN_ID_CHECK = '10X98765432';
// Province-level prefixes of GB/T 2260 (11 Beijing … 65 Xinjiang, 71 Taiwan, 81/82 HK/Macau, 83 HMT residence permits).
const CN_PROVINCES = new Set([
  11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46, 50, 51, 52,
  53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83,
]);

/** ISO 7064 MOD 11-2 check character (0-9 or X) for the first 17 digits of a resident id. */
export function cnIdCheckChar(first17: string): string {
  let sum = 0;
  for (let i = 0; i < 17; i++) sum += (first17.charCodeAt(i) - 48) * CN_ID_WEIGHTS[i];
  return CN_ID_CHECK[sum % 11];
}

/**
 * Validates an 18-character Chinese resident id: known province prefix, a real birth date
 * between 1850-01-01 and `today`, and the MOD 11-2 check character (upper- or lower-case x).
 */
export function cnIdValid(id: string, today: Date = new Date()): boolean {
  if (!/^\d{17}[\dXx]$/.test(id)) return false;
  if (!CN_PROVINCES.has(Number(id.slice(0, 2)))) return false;
  const year = Number(id.slice(6, 10));
  const month = Number(id.slice(10, 12));
  const day = Number(id.slice(12, 14));
  if (year < 1850 || !isRealDate(year, month, day)) return false;
  const birth = Date.UTC(year, month - 1, day);
  if (birth > today.getTime()) return false;
  return cnIdCheckChar(id) === id[17].toUpperCase();
}

/** US SSN area/group/serial rules: area not 000, 666 or 9xx; group not 00; serial not 0000. */
export function ssnValid(area: string, group: string, serial: string): boolean {
  if (!/^\d{3}$/.test(area) || !/^\d{2}$/.test(group) || !/^\d{4}$/.test(serial)) return false;
  return area !== '000' && area !== '666' && area[0] !== '9' && group !== '00' && serial !== '0000';
}

/** NANP: area code and exchange both start with 2-9, and the area code is not N11 (411, 911 …). */
export function nanpValid(area: string, exchange: string): boolean {
  return /^[2-9]\d\d$/.test(area) && /^[2-9]\d\d$/.test(exchange) && area.slice(1) !== '11';
}

/** True for a dotted quad with every octet 0-255 and no leading zeros. */
export function ipv4Valid(ip: string): boolean {
  const parts = ip.split('.');
  return (
    parts.length === 4 && parts.every((p) => /^(?:0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255)
  );
}

/** Brand family of a card number by its issuer identification number and length, or null when no major network issues it. */
export function cardNetwork(digits: string): 'UNIONPAY' | 'INTERNATIONAL' | null {
  const n = digits.length;
  if (n < 13 || n > 19) return null;
  const p2 = Number(digits.slice(0, 2));
  const p3 = Number(digits.slice(0, 3));
  const p4 = Number(digits.slice(0, 4));
  if (p2 === 62 && n >= 16) return 'UNIONPAY';
  if (digits[0] === '4') return n === 13 || n === 16 || n === 19 ? 'INTERNATIONAL' : null; // Visa
  if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720))
    return n === 16 ? 'INTERNATIONAL' : null; // Mastercard
  if (p2 === 34 || p2 === 37) return n === 15 ? 'INTERNATIONAL' : null; // Amex
  if (n < 14) return null;
  if (p4 === 6011 || (p3 >= 644 && p3 <= 649) || p2 === 65) return n >= 16 ? 'INTERNATIONAL' : null; // Discover
  if (p4 >= 3528 && p4 <= 3589) return n >= 16 ? 'INTERNATIONAL' : null; // JCB
  if ((p3 >= 300 && p3 <= 305) || p4 === 3095 || p2 === 36 || p2 === 38 || p2 === 39) {
    return 'INTERNATIONAL'; // Diners Club, 14-19
  }
  if (p4 >= 2200 && p4 <= 2204) return n >= 16 ? 'INTERNATIONAL' : null; // Mir
  if (p2 === 50 || (p2 >= 56 && p2 <= 58) || p2 === 67) return 'INTERNATIONAL'; // Maestro
  return null;
}
