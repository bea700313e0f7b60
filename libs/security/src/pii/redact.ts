import { DETECTORS } from './detectors';
import { placeholder, TYPE_PRIORITY, type PiiSpan, type PiiType } from './types';

export interface RedactOptions {
  /** Only these types are detected and replaced; default: all. */
  types?: readonly PiiType[];
}

export interface RedactDeepOptions extends RedactOptions {
  /** Nesting below this depth is replaced by "[Truncated]"; default 10. */
  maxDepth?: number;
}

function better(a: PiiSpan, b: PiiSpan): boolean {
  const la = a.end - a.start;
  const lb = b.end - b.start;
  return la !== lb ? la > lb : TYPE_PRIORITY[a.type] < TYPE_PRIORITY[b.type];
}

/** Sorts candidate spans and keeps a non-overlapping subset: of two overlapping spans the longer wins, then the more specific type. */
export function resolveSpans(candidates: readonly PiiSpan[]): PiiSpan[] {
  const sorted = candidates
    .filter((s) => s.end > s.start)
    .sort(
      (a, b) => a.start - b.start || b.end - a.end || TYPE_PRIORITY[a.type] - TYPE_PRIORITY[b.type],
    );
  const kept: PiiSpan[] = [];
  for (const span of sorted) {
    const last = kept[kept.length - 1];
    if (!last || span.start >= last.end) kept.push(span);
    else if (better(span, last)) kept[kept.length - 1] = span;
  }
  return kept;
}

/** Finds PII in `text`: non-overlapping spans sorted by start offset. */
export function detectPii(text: string, opts: RedactOptions = {}): PiiSpan[] {
  if (typeof text !== 'string' || text.length === 0) return [];
  const wanted = opts.types ? new Set(opts.types) : null;
  const candidates: PiiSpan[] = [];
  for (const detector of DETECTORS) {
    if (wanted && !detector.types.some((t) => wanted.has(t))) continue;
    for (const span of detector.detect(text)) {
      if (!wanted || wanted.has(span.type)) candidates.push(span);
    }
  }
  return resolveSpans(withoutMarkers(text, candidates));
}

const MARKER = /\[REDACTED_[A-Z_]+\]/g;

/**
 * Cuts `[REDACTED_…]` placeholders out of the spans: redacting redacted text (a logged line of a
 * stored message, a summary of redacted messages) changes nothing, where it used to take
 * `[REDACTED_PASSWORD]` for a password and leave a stray `]`. What a span holds beside a
 * placeholder is still redacted, so a placeholder typed into a message hides nothing
 * (`password=[REDACTED_X]hunter2` keeps no password).
 */
function withoutMarkers(text: string, spans: PiiSpan[]): PiiSpan[] {
  if (!text.includes('[REDACTED_')) return spans;
  const markers = [...text.matchAll(MARKER)].map((m) => [m.index!, m.index! + m[0].length]);
  return spans.flatMap((span) => {
    let pieces = [span];
    for (const [start, end] of markers)
      pieces = pieces.flatMap((p) =>
        p.end <= start || p.start >= end
          ? [p]
          : [
              { ...p, end: start },
              { ...p, start: end },
            ].filter((q) => q.end > q.start && text.slice(q.start, q.end).trim() !== ''),
      );
    return pieces;
  });
}

/**
 * Short strings redacted lately with every type, and what they became: a log line repeats the
 * same ids, service and context fields as the lines before it, and every one of them runs every
 * detector. The answer depends on the text alone, so a remembered one is the same answer.
 */
const recent = new Map<string, string>();
const RECENT_MAX = 2_000;
const RECENT_MAX_CHARS = 200;

/** Replaces every detected span by `[REDACTED_<TYPE>]`; text without PII comes back unchanged. */
export function redactPii(text: string, opts: RedactOptions = {}): string {
  if (opts.types || typeof text !== 'string' || text.length > RECENT_MAX_CHARS)
    return redactNow(text, opts);
  let out = recent.get(text);
  if (out === undefined) {
    out = redactNow(text, opts);
    if (recent.size >= RECENT_MAX) recent.clear();
    recent.set(text, out);
  }
  return out;
}

function redactNow(text: string, opts: RedactOptions): string {
  const spans = detectPii(text, opts);
  if (spans.length === 0) return text;
  let out = '';
  let pos = 0;
  for (const span of spans) {
    out += text.slice(pos, span.start) + placeholder(span.type);
    pos = span.end;
  }
  return out + text.slice(pos);
}

// One rule over the name lower-cased without separators (`Proxy_Authorization`, `x-api-key` and
// `AWS_SECRET_ACCESS_KEY` read as proxyauthorization, xapikey, awssecretaccesskey): what it ends
// with. An id or name of a credential (`accessKeyId`, `privateKeyId`, `secretName`) stays visible,
// and so do `tokens` and `maxTokens` (counts, not credentials). `auth` is a client's credentials
// (`auth: { user, pass }`, `proxyAuth: 'user:password'`); `pass` only as the whole name.
const PASSWORD_KEY = /(?:password|passwd|pwd|passphrase|passcode)s?$|^pass$/;
// `session` alone is a session cookie's usual name; `sessionId` (a Loom id) stays visible.
const SECRET_KEY =
  /(?:secrets?|token|jwts?|credentials?|auths?|authorizations?|cookies?|(?:api|private|secret|secretaccess|signing|encryption)keys?)$|^(?:session|sessionkey)$/;

/** The type a whole value is redacted as because of its key (`password`, `apiKey`, `x-api-key` …), or null. */
export function sensitiveKeyType(key: string): PiiType | null {
  const k = key.toLowerCase().replace(/[^a-z0-9]/g, '');
  if (PASSWORD_KEY.test(k)) return 'PASSWORD';
  if (SECRET_KEY.test(k)) return 'API_KEY';
  return null;
}

/**
 * `key` redacted; when that name is taken in `out` already (two emails as keys), numbered
 * (`[REDACTED_EMAIL] #2`), so no entry replaces another.
 */
function outputKey(out: Record<string, unknown>, key: string, opts: RedactDeepOptions): string {
  const redacted = redactPii(key, opts);
  if (redacted === key) return key;
  let name = redacted;
  for (let n = 2; Object.hasOwn(out, name); n++) name = `${redacted} #${n}`;
  return name;
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function walk(
  value: unknown,
  depth: number,
  ancestors: Set<object>,
  opts: RedactDeepOptions,
  /** The type of a secret-looking key this value is under: its texts and numbers go whole. */
  under: PiiType | null = null,
): unknown {
  if (under && ((typeof value === 'string' && value !== '') || typeof value === 'number'))
    return placeholder(under);
  if (typeof value === 'string') return redactPii(value, opts);
  if (typeof value === 'number') return redactNumber(value, opts);
  if (value === null || typeof value !== 'object') return value;
  if (ancestors.has(value)) return '[Circular]';
  const isArray = Array.isArray(value);
  const isError = value instanceof Error;
  if (depth >= (opts.maxDepth ?? 10)) return '[Truncated]';
  if (!isArray && !isError && !isPlainObject(value)) {
    // A class instance reaches a log line as JSON writes it: its toJSON (a URL's href, a Date's
    // ISO text), else its own fields. One whose JSON text holds nothing to redact is kept.
    const toJSON: unknown = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') {
      let json: unknown;
      try {
        json = toJSON.call(value);
      } catch {
        return '[Unreadable]';
      }
      if (json !== value) {
        const out = walk(json, depth + 1, ancestors, opts, under);
        return typeof json === 'string' && out === json ? value : out;
      }
    }
  }
  ancestors.add(value);
  try {
    if (isArray) return value.map((item) => walk(item, depth + 1, ancestors, opts, under));
    const out: Record<string, unknown> = {};
    if (isError) {
      out.name = value.name;
      out.message = walk(value.message, depth + 1, ancestors, opts, under);
      if (value.stack !== undefined)
        out.stack = walk(value.stack, depth + 1, ancestors, opts, under);
    }
    for (const key of Object.keys(value)) {
      let item: unknown;
      try {
        item = (value as Record<string, unknown>)[key];
      } catch {
        setOwn(out, key, '[Unreadable]');
        continue;
      }
      const keyType = sensitiveKeyType(key);
      const keyed = keyType && (!opts.types || opts.types.includes(keyType));
      // A key may carry PII as well (a phone number keying a contact): redacted like a value.
      // Under a secret-looking key, every text and number goes whole, in a list or object too.
      setOwn(
        out,
        outputKey(out, key, opts),
        walk(item, depth + 1, ancestors, opts, keyed ? keyType : under),
      );
    }
    return out;
  } catch {
    return '[Unreadable]';
  } finally {
    ancestors.delete(value);
  }
}

/**
 * A phone or card number that reached JSON as a number (a form's field): its placeholder, as the
 * same digits as text would be; any other number as it is. Only whole numbers of 7 digits or
 * more can be one.
 */
function redactNumber(value: number, opts: RedactOptions): number | string {
  if (!Number.isSafeInteger(value) || Math.abs(value) < 1_000_000) return value;
  const text = String(value);
  const redacted = redactPii(text, opts);
  return redacted === text ? value : redacted;
}

/**
 * Deep copy of `value` with every string redacted, keys included, for log objects (and a number
 * that is a phone or card number, as its placeholder). Walks plain objects and
 * arrays (Errors become `{ name, message, stack, … }`, other class instances what JSON writes for
 * them: their toJSON, or their own fields, kept as they are when that is text with nothing to
 * redact); values under password/secret/token-like
 * keys are replaced whole (each text and number, in lists and objects under them too). Cycles become "[Circular]", nesting past `maxDepth` "[Truncated]",
 * throwing getters "[Unreadable]". Never throws.
 */
export function redactDeep<T>(value: T, opts: RedactDeepOptions = {}): T {
  try {
    return walk(value, 0, new Set(), opts) as T;
  } catch {
    return '[Unreadable]' as unknown as T;
  }
}

/** `out[key] = value` as an own property, also for `__proto__` (a key JSON.parse gives as data). */
function setOwn(out: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(out, key, { value, writable: true, enumerable: true, configurable: true });
}
