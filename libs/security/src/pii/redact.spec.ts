import { cnIdValid, luhnValid } from './checksums';
import { FALSE_CASES, PII_CORPUS, TRUE_CASES } from './pii-corpus';
import { detectPii, redactPii, resolveSpans } from './redact';
import { PII_TYPES, type PiiSpan, type PiiType } from './types';

// CARD and BANK_CARD are one family for scoring: both mean "a payment card number".
const family = (type: PiiType): PiiType => (type === 'BANK_CARD' ? 'CARD' : type);
const covers = (s: PiiSpan, type: PiiType, start: number, end: number) =>
  family(s.type) === family(type) && s.start <= start && s.end >= end;

describe('corpus', () => {
  const results = PII_CORPUS.map((c) => {
    let from = 0;
    const expected = c.expected.map((e) => {
      const start = c.text.indexOf(e.value, from);
      if (start < 0) throw new Error(`corpus value ${e.value} not in ${c.text}`);
      from = start + 1;
      return { type: e.type, start, end: start + e.value.length };
    });
    return { text: c.text, expected, spans: detectPii(c.text) };
  });

  it('has at least 200 cases, 70 of them false, and true cases for every type', () => {
    expect(PII_CORPUS.length).toBeGreaterThanOrEqual(200);
    expect(FALSE_CASES.length).toBeGreaterThanOrEqual(70);
    const labelled = new Set(TRUE_CASES.flatMap((c) => c.expected.map((e) => e.type)));
    expect([...labelled].sort()).toEqual([...PII_TYPES].sort());
  });

  it('reaches precision and recall of at least 0.95 per type and overall', () => {
    const stats = new Map<
      PiiType,
      { expected: number; found: number; spans: number; correct: number }
    >();
    const row = (type: PiiType) => {
      if (!stats.has(type)) stats.set(type, { expected: 0, found: 0, spans: 0, correct: 0 });
      return stats.get(type)!;
    };
    for (const r of results) {
      for (const e of r.expected) {
        row(e.type).expected++;
        if (r.spans.some((s) => covers(s, e.type, e.start, e.end))) row(e.type).found++;
      }
      for (const s of r.spans) {
        row(s.type).spans++;
        if (r.expected.some((e) => covers(s, e.type, e.start, e.end))) row(s.type).correct++;
      }
    }
    const ratio = (n: number, d: number) => (d === 0 ? 1 : n / d);
    const total = { expected: 0, found: 0, spans: 0, correct: 0 };
    const lines = PII_TYPES.map((type) => {
      const s = row(type);
      total.expected += s.expected;
      total.found += s.found;
      total.spans += s.spans;
      total.correct += s.correct;
      const p = ratio(s.correct, s.spans);
      const rc = ratio(s.found, s.expected);
      return `${type.padEnd(9)} precision=${p.toFixed(3)} (${s.correct}/${s.spans}) recall=${rc.toFixed(3)} (${s.found}/${s.expected})`;
    });
    const precision = ratio(total.correct, total.spans);
    const recall = ratio(total.found, total.expected);
    lines.push(
      `TOTAL     precision=${precision.toFixed(3)} (${total.correct}/${total.spans}) recall=${recall.toFixed(3)} (${total.found}/${total.expected})`,
    );
    console.log(lines.join('\n'));
    for (const type of PII_TYPES) {
      expect(ratio(row(type).correct, row(type).spans)).toBeGreaterThanOrEqual(0.95);
      expect(ratio(row(type).found, row(type).expected)).toBeGreaterThanOrEqual(0.95);
    }
    expect(precision).toBeGreaterThanOrEqual(0.95);
    expect(recall).toBeGreaterThanOrEqual(0.95);
  });

  it('never reports a checksum-invalid number as a card or resident id', () => {
    for (const r of results) {
      for (const s of r.spans) {
        const value = r.text.slice(s.start, s.end).replace(/[ -]/g, '');
        if (s.type === 'CARD' || s.type === 'BANK_CARD') expect(luhnValid(value)).toBe(true);
        if (s.type === 'CN_ID') expect(cnIdValid(value)).toBe(true);
      }
    }
  });

  it.each(FALSE_CASES.map((c) => [c.text]))('leaves %j byte-identical', (text) => {
    expect(redactPii(text)).toBe(text);
  });
});

describe('redactPii', () => {
  it('replaces each span by its placeholder and keeps everything else', () => {
    expect(redactPii('mail a@b.com, call 13800138000, id 11010519491231002X.')).toBe(
      'mail [REDACTED_EMAIL], call [REDACTED_PHONE], id [REDACTED_CN_ID].',
    );
  });

  it('only touches the requested types', () => {
    const text = 'a@b.com 13800138000';
    expect(redactPii(text, { types: ['PHONE'] })).toBe('a@b.com [REDACTED_PHONE]');
    expect(redactPii(text, { types: [] })).toBe(text);
  });

  it('returns empty and PII-free strings unchanged', () => {
    expect(redactPii('')).toBe('');
    expect(redactPii('nothing to see here')).toBe('nothing to see here');
  });

  it('changes nothing in text it already redacted, for every case of the corpus', () => {
    // Logged lines and summaries are redacted again; a password used to gain a stray "]" each time.
    expect(redactPii(redactPii('password=hunter2hunter2'))).toBe('password=[REDACTED_PASSWORD]');
    // A placeholder typed into a message hides nothing beside it.
    expect(redactPii('password=[REDACTED_X]hunter2hunter2')).toBe(
      'password=[REDACTED_X][REDACTED_PASSWORD]',
    );
    expect(redactPii('[REDACTED_EMAIL]john.doe@example.com')).toBe(
      '[REDACTED_EMAIL][REDACTED_EMAIL]',
    );
    for (const c of PII_CORPUS) {
      const once = redactPii(c.text);
      expect([c.text, redactPii(once)]).toEqual([c.text, once]);
    }
  });
});

describe('resolveSpans', () => {
  it('keeps the longer of overlapping spans, then the more specific type', () => {
    const spans: PiiSpan[] = [
      { type: 'PHONE', start: 4, end: 15 },
      { type: 'PHONE', start: 0, end: 15 },
      { type: 'EMAIL', start: 20, end: 30 },
      { type: 'API_KEY', start: 20, end: 30 },
      { type: 'IP', start: 40, end: 45 },
    ];
    expect(resolveSpans(spans)).toEqual([
      { type: 'PHONE', start: 0, end: 15 },
      { type: 'API_KEY', start: 20, end: 30 },
      { type: 'IP', start: 40, end: 45 },
    ]);
  });
});
