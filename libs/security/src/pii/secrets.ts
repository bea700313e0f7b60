import type { Detector, PiiSpan } from './types';

// Token shapes; each is anchored so it cannot start inside a longer identifier. `sk-…` and `eyJ…`
// also start ordinary words and names, so they count only with a digit in them (real keys are
// random; kebab-case words are not).
const GENERIC_SHAPES: readonly RegExp[] = [
  /(?<![\w-])sk-[A-Za-z0-9_-]{20,}/g, // OpenAI / Anthropic, including sk-proj-…, sk-ant-…
  /(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, // JWT
];
// A vendor's own prefix and length say enough: no digit needed (one GitLab token in 30 has none).
const VENDOR_SHAPES: readonly RegExp[] = [
  /(?<![\w-])[rs]k_(?:live|test)_[A-Za-z0-9]{16,}/g, // Stripe secret / restricted keys
  /(?<![\w-])whsec_[A-Za-z0-9]{24,}/g, // Stripe webhook signing secret
  /(?<![\w-])gh[pousr]_[A-Za-z0-9]{36,}/g, // GitHub tokens
  /(?<![\w-])github_pat_[A-Za-z0-9_]{22,}/g,
  /(?<![\w-])gl(?:pat|oas|dt|rt|cbt|ptt|ft|imt|agent|soat)-[A-Za-z0-9_-]{20,}/g, // GitLab
  /(?<![\w-])xox[abposre]-[A-Za-z0-9-]{10,}/g, // Slack
  /(?<![\w-])xapp-\d-[A-Za-z0-9-]{10,}/g, // Slack app-level token
  /(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])/g, // AWS access key id
  /(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])/g, // Google API key
  /(?<![\w-])GOCSPX-[A-Za-z0-9_-]{28}(?![\w-])/g, // Google OAuth client secret
  /(?<![\w.-])ya29\.[A-Za-z0-9_-]{20,}/g, // Google OAuth access token
  /(?<![\w-])npm_[A-Za-z0-9]{36}(?![\w-])/g, // npm
  /(?<![\w-])pypi-AgE[A-Za-z0-9_-]{50,}/g, // PyPI
  /(?<![\w.-])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![\w-])/g, // SendGrid
  /(?<![\w-])hf_[A-Za-z]{34}(?![\w-])/g, // Hugging Face
  /(?<![\w-])shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}(?![\w-])/g, // Shopify
  /(?<![\w-])do[por]_v1_[a-f0-9]{64}(?![\w-])/g, // DigitalOcean
];
// The secret path of a Slack incoming webhook (T…/B…/…): whoever has it can post as the app.
const SLACK_WEBHOOK =
  /\bhooks\.slack\.com\/(?:services|workflows|triggers)\/([A-Za-z0-9_/-]{16,512})/dg;
// An AWS secret access key (40 base64 characters) right after its key id, as a credentials CSV,
// an env dump or an SDK's error quotes the pair: `AKIA… wJalr…`, `AKIA…,wJalr…`, `"AKIA…": "wJalr…"`.
const AWS_KEY_PAIR =
  /(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}["']?(?:[ \t]{0,4}[,:;=|][ \t]{0,4}|[ \t]{1,4})["']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])/dg;

// Any JWS/JWE compact form: base64url parts joined by dots (an unsigned token's last one empty).
// What makes it a JWT is its first part, a JOSE header: JSON naming an `alg`, however that JSON
// is spaced or ordered (so its base64 need not start with eyJ).
const COMPACT_JOSE =
  /(?<![\w.-])([A-Za-z0-9_-]{8,2048})\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){0,2}/g;

function isJoseHeader(segment: string): boolean {
  const json = Buffer.from(segment, 'base64url').toString('utf8').trim();
  if (!json.startsWith('{') || !json.endsWith('}')) return false;
  try {
    const header: unknown = JSON.parse(json);
    return (
      typeof header === 'object' &&
      header !== null &&
      typeof (header as { alg?: unknown }).alg === 'string'
    );
  } catch {
    return false;
  }
}
const TOKEN_CHARS = '[A-Za-z0-9._~+/-]';
const BEARER = new RegExp(`\\bBearer[ \\t]{1,4}(${TOKEN_CHARS}{16,}=*)`, 'dgi');
// After a name that can only mean a credential, 12 characters are enough to be one (a test or
// legacy key); after a bare `token` or `secret`, which prose and config use for other things, 20.
const KEY_SEPARATOR = `["']?[ \\t]{0,4}[:=：][ \\t]{0,4}["']?`;
const KEYED_SECRET = new RegExp(
  '(?:(?:api[_ -]?key|apikey|api[_-]?secret|access[_-]?token|auth[_-]?token|refresh[_-]?token|' +
    `id[_-]?token|secret[_-]?key|secret[_-]?access[_-]?key|client[_-]?secret|private[_-]?key)${KEY_SEPARATOR}(${TOKEN_CHARS}{12,}=*)` +
    `|(?:token|secret)${KEY_SEPARATOR}(${TOKEN_CHARS}{20,}=*))`,
  'dgi',
);

// A presigned S3/GCS URL's or an Azure SAS URL's signature: the URL is a credential until it
// expires. Only as a query parameter, and 16 characters or more.
const URL_SIGNATURE =
  /[?&](?:x-amz-signature|x-goog-signature|signature|sig)=([A-Za-z0-9%._~+/-]{16,1024})/dgi;

// A credential header quoted in text (a request dump, an HTTP library's error, JSON of headers):
// its value whatever its length, after one of the schemes Authorization uses; a Cookie's
// `name=value…` to the end of the line. Prose that only names them ("Authorization: please…",
// "Cookie: chocolate chip") has no scheme or no `name=`.
const HEADER_KEY = `["']?[ \\t]{0,4}:[ \\t]{0,4}["']?`;
const AUTH_HEADER = new RegExp(
  `(?<![\\w-])(?:proxy-)?authorization${HEADER_KEY}` +
    '(?:bearer|basic|token|digest|negotiate|ntlm|apikey|api-key|key|bot|sso-key|ssws)[ \\t]{1,4}' +
    `(${TOKEN_CHARS}{1,4096}=*)`,
  'dgi',
);
// The other headers that carry a key or token as their whole value.
const KEY_HEADER = new RegExp(
  '(?<![\\w-])(?:x-(?:api-key|auth-token|access-token|amz-security-token|goog-api-key|vault-token|' +
    `gitlab-token|functions-key)|private-token|api-key|ocp-apim-subscription-key)${HEADER_KEY}` +
    `([^\\s"'\`,;]{1,4096})`,
  'dgi',
);
const COOKIE_HEADER = new RegExp(
  `(?<![\\w-])(?:set-)?cookie${HEADER_KEY}([^\\s=;,"'\`]{1,256}=[^\\r\\n"'\`]{0,4096})`,
  'dgi',
);

// A PEM private key's base64 body (real or JSON-escaped newlines), to its END line or as far as
// it goes when cut short. Certificates and public keys are left alone.
const PEM_PRIVATE_KEY =
  /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----((?:[A-Za-z0-9+/=\s]|\\[rn])+)/dg;

const BASIC_AUTH = /\bBasic[ \t]{1,4}([A-Za-z0-9+/]{12,}={0,2})(?![\w+/=])/dg;
// scheme://user:password@host — the password part only, to the authority's last @ (as a URL
// parser reads it: `redis://:p@ss@host` has the password p@ss).
const URL_CREDENTIALS = /\b[A-Za-z][A-Za-z0-9+.-]{1,20}:\/\/[^\s:/?#@]{0,64}:([^\s/?#]{1,128})@/dg;
// The same with spaces in the password (unencoded, as a URL parser still takes it: `redis://u:pa
// ss@host`): up to 8 words without @, where the one above found no @ before the space.
const URL_SPACED_CREDENTIALS =
  /\b[A-Za-z][A-Za-z0-9+.-]{1,20}:\/\/[^\s:/?#@]{0,64}:([^\s/?#@]{1,128}(?:[ \t]{1,4}[^\s/?#@]{1,128}){1,8})@/dg;

// The same with `/`, `?` or `#` in the password, left unencoded as people write one in an env var
// (`REDIS_URL=redis://:s3cr#et@redis`): no URL parser takes it, so it reaches an error message
// whole. A port before a path or query (`http://host:8080/?mail=a@b.com`) is not one. One run
// of the class to the @, the sign looked for after: two runs around it backtracked quadratically
// (a 100,000-character message of `ab://c:/` took 50 times as long).
const URL_RAW_CREDENTIALS =
  /\b[A-Za-z][A-Za-z0-9+.-]{1,20}:\/\/[^\s:/?#@]{0,64}:([^\s@]{1,128})@/dg;

/**
 * The passwords of scheme://user:password@host in `text`. A first word that is a port
 * (`http://host:8080 then…`) or ends a clause (`http://a:b, or…`) starts prose, not a password.
 */
export function urlPasswordRanges(text: string): Array<[number, number]> {
  if (!text.includes('://')) return [];
  const ranges: Array<[number, number]> = [];
  for (const m of text.matchAll(URL_CREDENTIALS)) ranges.push(m.indices![1]);
  for (const m of text.matchAll(URL_SPACED_CREDENTIALS)) {
    const [start, end] = m.indices![1];
    if (end - start > 128 || ranges.some(([s, e]) => start < e && s < end)) continue;
    if (/^(?:\d+|\S*[,;.!?)])[ \t]/.test(m[1])) continue;
    ranges.push([start, end]);
  }
  for (const m of text.matchAll(URL_RAW_CREDENTIALS)) {
    const [start, end] = m.indices![1];
    if (!/[/?#]/.test(m[1]) || /^\d*[/?#]/.test(m[1])) continue;
    if (ranges.some(([s, e]) => start < e && s < end)) continue;
    ranges.push([start, end]);
  }
  return ranges;
}

// `password` and its kin also joined to a word (PGPASSWORD, newPassword); a bare `pwd` only alone.
const PASSWORD_KEY =
  /(?:pass(?:word|wd|phrase|code)|(?<![A-Za-z])pwd|密码|口令)["']?(?:[ \t]{0,4}([:=：]|是|为|\bis\b)[ \t]{0,4}|[ \t]{1,4})/gi;
const PASSWORD_MAX = 128;

// Trailing sentence punctuation is not part of a token.
function trimEnd(text: string, start: number, end: number): number {
  while (end > start && '.,;:)]}\'"'.includes(text[end - 1])) end--;
  return end;
}

function detectApiKey(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const re of [...GENERIC_SHAPES, ...VENDOR_SHAPES]) {
    for (const m of text.matchAll(re)) {
      const start = m.index ?? 0;
      if (GENERIC_SHAPES.includes(re) && !/\d/.test(m[0])) continue;
      spans.push({ type: 'API_KEY', start, end: trimEnd(text, start, start + m[0].length) });
    }
  }
  for (const m of text.matchAll(AWS_KEY_PAIR)) {
    // Random base64 has both cases and a digit, + or /; a 40-letter word has not.
    if (!/[a-z]/.test(m[1]) || !/[A-Z]/.test(m[1]) || !/[\d+/]/.test(m[1])) continue;
    const [start, end] = m.indices?.[1] ?? [0, 0];
    spans.push({ type: 'API_KEY', start, end });
  }
  for (const m of text.matchAll(SLACK_WEBHOOK)) {
    const [start, end] = m.indices?.[1] ?? [0, 0];
    spans.push({ type: 'API_KEY', start, end: trimEnd(text, start, end) });
  }
  for (const m of text.matchAll(COMPACT_JOSE)) {
    if (!isJoseHeader(m[1])) continue;
    // No trimming: the dot that ends an unsigned token is part of it.
    const start = m.index ?? 0;
    spans.push({ type: 'API_KEY', start, end: start + m[0].length });
  }
  for (const m of text.matchAll(PEM_PRIVATE_KEY)) {
    let [start, end] = m.indices?.[1] ?? [0, 0];
    while (start < end && /\s/.test(text[start])) start++;
    while (end > start && /\s/.test(text[end - 1])) end--;
    if (end > start) spans.push({ type: 'API_KEY', start, end });
  }
  for (const re of [
    BEARER,
    KEYED_SECRET,
    BASIC_AUTH,
    AUTH_HEADER,
    KEY_HEADER,
    COOKIE_HEADER,
    URL_SIGNATURE,
  ]) {
    for (const m of text.matchAll(re)) {
      const [start, end] = m.indices?.[1] ?? m.indices?.[2] ?? [0, 0];
      if (re === BASIC_AUTH && !/[\d=]/.test(m[1])) continue;
      spans.push({ type: 'API_KEY', start, end: trimEnd(text, start, end) });
    }
  }
  return spans;
}

// The password value after the keyword at `from`, or null when it does not look like one.
function passwordValue(text: string, from: number, strong: boolean): [number, number] | null {
  const quote = text[from];
  if (quote === '"' || quote === "'" || quote === '`') {
    const close = text.indexOf(quote, from + 1);
    if (close > from + 1 && close - from <= PASSWORD_MAX) return [from + 1, close];
    return null;
  }
  let end = from;
  while (end < text.length && end - from < PASSWORD_MAX && /[!-~]/.test(text[end])) end++;
  end = trimEnd(text, from, end);
  if (end === from) return null;
  const value = text.slice(from, end);
  // After a bare space or "is" the value must look like a secret, not a word ("password reset").
  if (!strong && (value.length < 4 || !/[\d!@#$%^&*_+=?~]/.test(value))) return null;
  return [from, end];
}

function detectPassword(text: string): PiiSpan[] {
  const spans: PiiSpan[] = [];
  for (const m of text.matchAll(PASSWORD_KEY)) {
    const strong = m[1] !== undefined && m[1].toLowerCase() !== 'is';
    const range = passwordValue(text, (m.index ?? 0) + m[0].length, strong);
    if (range) spans.push({ type: 'PASSWORD', start: range[0], end: range[1] });
  }
  for (const [start, end] of urlPasswordRanges(text)) spans.push({ type: 'PASSWORD', start, end });
  return spans;
}

/** Provider API keys, JWTs, Bearer/Basic credentials and `api_key=…`-style assignments (the value only). */
export const apiKeyDetector: Detector = { types: ['API_KEY'], detect: detectApiKey };

/** The value after password / passwd / pwd / 密码 (password, passwd … joined to a word too: PGPASSWORD, newPassword) and ":", "=", "是", "is" or a space; the password in scheme://user:password@host. */
export const passwordDetector: Detector = { types: ['PASSWORD'], detect: detectPassword };
