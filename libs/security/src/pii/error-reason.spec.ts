import { redactedReason } from './error-reason';

describe('redactedReason', () => {
  // A start failure quoting a URL whose password has a space in it printed the password.
  it("redacts a URL's password with a space in it", () => {
    expect(redactedReason(new Error('connect redis://:pa ss@redis:6379 failed'))).toBe(
      'connect redis://:[REDACTED_PASSWORD]@redis:6379 failed',
    );
  });

  // An operator command's error quoting an env var or a request body kept the password.
  it('redacts a password after PGPASSWORD= or a camelCase field name', () => {
    expect(redactedReason(new Error('PGPASSWORD=secret123 psql: connection refused'))).toBe(
      'PGPASSWORD=[REDACTED_PASSWORD] psql: connection refused',
    );
    expect(redactedReason('bad body {"newPassword":"s3cret!"}')).toBe(
      'bad body {"newPassword":"[REDACTED_PASSWORD]"}',
    );
  });
});
