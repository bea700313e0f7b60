import { redactPii } from './redact';

/*
 * 100 KB inputs aimed at each regex's worst case. The assertions check the result; a regex with
 * catastrophic backtracking would not finish within Jest's timeout, so timing needs no assert.
 */
const N = 100_000;

describe('adversarial 100 KB inputs', () => {
  it.each([
    ['digit groups', '1 '.repeat(N / 2)],
    ['one digit run', '7'.repeat(N)],
    ['dotted digits', '1.'.repeat(N / 2)],
    ['hyphenated digits', '1-'.repeat(N / 2)],
    ['colons and hex', 'a:'.repeat(N / 2)],
    ['email local part without @', 'a'.repeat(N)],
    ['email without TLD', 'a@' + 'b-'.repeat(N / 2)],
    ['JWT header without dots', 'eyJ' + 'a'.repeat(N)],
    ['plus signs', '+1 '.repeat(N / 3)],
    ['password keywords', 'password '.repeat(N / 9)],
    ['password then spaces', 'password' + ' '.repeat(N)],
    ['keyed secret then spaces', 'token:' + ' '.repeat(N)],
    ['passport keywords', 'passport '.repeat(N / 9)],
    ['SSN-like fragments', '999-45-'.repeat(N / 7)],
    ['IPv6-like', '1::'.repeat(N / 3)],
    ['dotted quads chained', '1.1.1.1.'.repeat(N / 8)],
    ['URL credentials without @', 'db://' + 'a:'.repeat(N / 2)],
    ['many word starts', ' a://b:'.repeat(N / 7)],
    ['URL password words without @', 'db://u:' + 'ab '.repeat((2 * N) / 3)],
    ['URL starts then short words', ' a://b:c d e'.repeat((2 * N) / 12)],
    ['socket errors', 'connect ECONNREFUSED 10.0.0.1:6379 '.repeat((2 * N) / 35)],
    ['key header names without values', 'x-api-key:  \n'.repeat((2 * N) / 13)],
    ['Slack webhook paths', 'hooks.slack.com/services/'.repeat((2 * N) / 25)],
    ['vendor prefixes', 'glpat-ghp_xapp-1-SG.ya29.npm_hf_ '.repeat((2 * N) / 34)],
  ])('%s: no false redaction', (_name, text) => {
    expect(redactPii(text)).toBe(text);
  });

  // 200 KB: a key id before every short word, or before one long word, leaves the words alone.
  it.each([
    ['short words', 'AKIAIOSFODNN7EXAMPLE abc '.repeat((2 * N) / 25)],
    ['one long word', 'AKIAIOSFODNN7EXAMPLE ' + 'a'.repeat(2 * N)],
  ])('AWS key ids then %s: only the ids redacted', (_name, text) => {
    const expected = text.replaceAll('AKIAIOSFODNN7EXAMPLE', '[REDACTED_API_KEY]');
    expect(redactPii(text) === expected).toBe(true);
  });

  it('redacts every card in 100 KB of cards', () => {
    const text = '4111 1111 1111 1111, '.repeat(N / 21);
    const out = redactPii(text);
    expect(out).toBe('[REDACTED_CARD], '.repeat(N / 21));
  });

  it('redacts every resident id in 100 KB of ids', () => {
    const text = '11010519491231002X '.repeat(N / 19);
    expect(redactPii(text)).toBe('[REDACTED_CN_ID] '.repeat(N / 19));
  });
});
