/*
 * Keyword context around bare numbers. A long digit run right after "order no." or "运单号" is an
 * identifier of ours, not a card or a phone, unless a closer keyword says otherwise.
 */
const CONTEXT_WINDOW = 24;
const CONTEXT_KEYWORDS = new RegExp(
  [
    // 1: negative — business identifiers that merely look like cards or phones
    '(\\b(?:order|invoice|tracking|waybill|shipment|parcel|reference|ref|serial|sku|txn|transaction|ticket|booking)\\b|订单|发票|运单|快递|单号|流水号?|交易号|工单|序列号)',
    // 2: positive — the number is about a person's card or phone
    '(\\b(?:phone|mobile|tel|call|cell|contact|whatsapp|card|visa|mastercard|amex|credit|debit|bank|account)\\b|手机|电话|致电|联系|卡号|信用卡|银行卡|储蓄卡|借记卡|账号|账户|帐号)',
  ].join('|'),
  'gi',
);
const BANK_KEYWORDS = /(?:\b(?:bank|debit|account)\b|银行|储蓄卡|借记卡|卡号|账号|账户|帐号|开户)/i;
const CURRENCY_BEFORE = /[¥￥$€£]\s?$/;
const UNIT_AFTER =
  /^\s?(?:元|块|角|美元|人民币|万|亿|円|(?:usd|cny|rmb|eur|dollars?|yuan|bytes?|ms|kb|mb|gb|tokens?)(?![A-Za-z]))/i;
const VERSION_BEFORE =
  /(?:\bversion|\bver\.?|\brelease|\bbuild|\bfirmware|版本号?|固件)\s*[:：=#]?\s*$/i;

/** The nearest business keyword before `start`: 'negative' (order, invoice …), 'positive' (phone, card …) or null. */
export function nearestContext(text: string, start: number): 'negative' | 'positive' | null {
  const window = text.slice(Math.max(0, start - CONTEXT_WINDOW), start);
  let last: 'negative' | 'positive' | null = null;
  for (const m of window.matchAll(CONTEXT_KEYWORDS))
    last = m[1] !== undefined ? 'negative' : 'positive';
  return last;
}

/** True when a bank-account keyword (银行卡, 卡号, bank, account …) appears shortly before `start`. */
export function hasBankContext(text: string, start: number): boolean {
  return BANK_KEYWORDS.test(text.slice(Math.max(0, start - CONTEXT_WINDOW), start));
}

/** True when the number at [start, end) is written as an amount (¥123…, 123 元, 500 tokens). */
export function looksLikeAmount(text: string, start: number, end: number): boolean {
  return (
    CURRENCY_BEFORE.test(text.slice(Math.max(0, start - 2), start)) ||
    UNIT_AFTER.test(text.slice(end, end + 10))
  );
}

/** True when the dotted number at `start` is introduced as a version ("version 1.2.3.4", "版本 10.0.0.1"). */
export function afterVersionKeyword(text: string, start: number): boolean {
  return VERSION_BEFORE.test(text.slice(Math.max(0, start - 16), start));
}
