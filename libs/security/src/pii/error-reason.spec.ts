import { redactedReason } from './error-reason';

describe('redactedReason', () => {
  // A start failure quoting a URL whose password has a space in it printed the password.
  it("redacts a URL's password with a space in it", () => {
    expect(redactedReason(new Error('connect redis://:pa ss@redis:6379 failed'))).toBe(
      'connect redis://:[REDACTED_PASSWORD]@redis:6379 failed',
    );
  });
});
