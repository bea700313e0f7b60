import { redisVersionProblem } from './session.providers';

describe('redisVersionProblem', () => {
  const info = (version: string) =>
    `# Server\r\nredis_version:${version}\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n`;

  it('accepts Redis 7 and later, and a server that names no version', () => {
    expect(redisVersionProblem(info('7.0.15'))).toBeNull();
    expect(redisVersionProblem(info('7.2.4'))).toBeNull();
    expect(redisVersionProblem(info('8.0.0'))).toBeNull();
    expect(redisVersionProblem('')).toBeNull();
  });

  it('names an older version and what Loom needs', () => {
    expect(redisVersionProblem(info('6.2.14'))).toBe(
      'the Redis at REDIS_URL is version 6.2: Loom needs Redis 7.0 or later',
    );
  });
});
