import { isRedisUnavailable } from './redis-errors';

describe('ioredis availability errors', () => {
  it.each([
    new Error('Command timed out'),
    new Error('Connection is closed.'),
    new Error("Stream isn't writeable and enableOfflineQueue options is false"),
    Object.assign(new Error('Reached the max retries per request limit (which is 1).'), {
      name: 'MaxRetriesPerRequestError',
    }),
  ])('are recognised: %s', (err) => expect(isRedisUnavailable(err)).toBe(true));

  it.each([
    new Error('ERR wrong number of arguments'),
    new Error('NOSCRIPT No matching script'),
    { message: 'Command timed out' },
    null,
  ])('other errors are not: %s', (err) => expect(isRedisUnavailable(err)).toBe(false));
});
