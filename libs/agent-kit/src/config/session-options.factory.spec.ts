import { parseEnv } from './loom-env';
import { sessionOptionsFrom } from './session-options.factory';

/** What a handler may share: an instance of its own class, not a plain object. */
class Finding {
  constructor(
    readonly title: string,
    readonly contact: string,
  ) {}
}

describe('sessionOptionsFrom: LOOM_REDACT_STORED and shared values', () => {
  const redact = sessionOptionsFrom(
    parseEnv({
      LOOM_JWT_SECRET: 'x'.repeat(32),
      LOOM_AGENT_SECRET: 'y'.repeat(32),
      LOOM_REDACT_STORED: 'true',
    }),
  ).redactShared!;
  const stored = (value: unknown) => JSON.stringify(redact(value));

  it('redacts a value as it is stored (its JSON), whatever class it is an instance of', () => {
    const finding = new Finding('Labour contract, art. 23', 'call 13800138000');
    expect(stored(finding)).not.toContain('13800138000');
    expect(stored({ findings: [finding] })).not.toContain('13800138000');
    expect(stored({ toJSON: () => ({ contact: 'call 13800138000' }) })).not.toContain(
      '13800138000',
    );
    expect(JSON.parse(stored(finding))).toMatchObject({ title: 'Labour contract, art. 23' });
  });

  it('keeps what JSON leaves out, out', () => {
    expect(redact(undefined)).toBeUndefined();
    expect(stored({ a: 1, b: undefined })).toBe('{"a":1}');
  });
});
