import { LoomError, LoomErrorCode } from '../../errors/session-error';
import { asUnavailable, isConnectionError } from './mysql-errors';

describe('driver connection errors', () => {
  it.each([
    Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:3306'), { code: 'ECONNREFUSED' }),
    Object.assign(new Error('Connection lost: The server closed the connection.'), {
      code: 'PROTOCOL_CONNECTION_LOST',
      fatal: true,
    }),
    Object.assign(new Error('Too many connections'), { code: 'ER_CON_COUNT_ERROR', errno: 1040 }),
    Object.assign(new Error('query failed'), { driverError: { code: 'ETIMEDOUT' } }),
    { errno: 1053, message: 'Server shutdown in progress' },
    new Error("Can't add new command when connection is in closed state"),
  ])('become UNAVAILABLE: %s', (err) => {
    expect(isConnectionError(err)).toBe(true);
    expect(asUnavailable(err)).toMatchObject({ code: LoomErrorCode.UNAVAILABLE });
  });

  it('a full pool queue (load) is UNAVAILABLE with a retry hint, not a database out of reach', () => {
    const err = new Error('Queue limit reached.');
    expect(isConnectionError(err)).toBe(false);
    expect(asUnavailable(err)).toMatchObject({
      code: LoomErrorCode.UNAVAILABLE,
      message: 'the durable store is overloaded; retry in a moment',
      details: { retryAfterS: 1 },
    });
    const down = asUnavailable(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }));
    expect((down as LoomError).details?.retryAfterS).toBeUndefined();
  });

  it.each([
    Object.assign(new Error('Deadlock found when trying to get lock'), { errno: 1213 }),
    Object.assign(new Error('query failed'), { driverError: { errno: 1205 } }),
  ])('contention that outlasted its retries becomes UNAVAILABLE too: %s', (err) => {
    expect(isConnectionError(err)).toBe(false);
    expect(asUnavailable(err)).toMatchObject({ code: LoomErrorCode.UNAVAILABLE });
  });

  it.each([
    Object.assign(new Error('The MariaDB server is running with the --read-only option'), {
      code: 'ER_OPTION_PREVENTS_STATEMENT',
      errno: 1290,
    }),
    Object.assign(new Error('query failed'), {
      driverError: { code: 'ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION', errno: 1792 },
    }),
    Object.assign(new Error('Running in read-only mode'), { errno: 1836 }),
    Object.assign(new Error("The table 'loom_session_state' is full"), { errno: 1114 }),
    Object.assign(new Error('Disk full; waiting for someone to free some space'), { errno: 1021 }),
    Object.assign(new Error("User loom already has more than 'max_user_connections'"), {
      code: 'ER_TOO_MANY_USER_CONNECTIONS',
      errno: 1203,
    }),
    Object.assign(new Error("User 'loom' has exceeded the 'max_user_connections' resource"), {
      errno: 1226,
    }),
  ])('a server read-only, full or at its connection limits is UNAVAILABLE: %s', (err) => {
    expect(asUnavailable(err)).toMatchObject({ code: LoomErrorCode.UNAVAILABLE });
  });

  it.each([
    Object.assign(new Error('Query execution was interrupted'), {
      code: 'ER_QUERY_INTERRUPTED',
      errno: 1317,
    }),
    Object.assign(new Error('Query execution was interrupted (max_statement_time exceeded)'), {
      errno: 1969,
    }),
    Object.assign(new Error('query failed'), {
      driverError: { code: 'ER_QUERY_TIMEOUT', errno: 3024 },
    }),
  ])('a statement the server interrupted (KILL QUERY, a time limit) is UNAVAILABLE: %s', (err) => {
    expect(asUnavailable(err)).toMatchObject({ code: LoomErrorCode.UNAVAILABLE });
  });

  it('a database that was never migrated is UNAVAILABLE, naming the command that fixes it', () => {
    const err = Object.assign(new Error("Table 'x.loom_session_state' doesn't exist"), {
      errno: 1146,
    });
    expect(asUnavailable({ driverError: err })).toMatchObject({
      code: LoomErrorCode.UNAVAILABLE,
      message: expect.stringContaining('npm run migration:run'),
    });
  });

  it.each([
    Object.assign(new Error('Duplicate entry'), { code: 'ER_DUP_ENTRY', errno: 1062 }),
    Object.assign(new Error('syntax'), { code: 'ER_PARSE_ERROR', errno: 1064 }),
    new LoomError(LoomErrorCode.STALE_FENCING_TOKEN, 'the connection is not the holder'),
    null,
    'ECONNREFUSED',
  ])('leave every other error as it is: %s', (err) => {
    expect(isConnectionError(err)).toBe(false);
    expect(asUnavailable(err)).toBe(err);
  });
});
