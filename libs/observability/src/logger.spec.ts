import { Writable } from 'stream';
import { createPinoLogger, LoomLogger } from './logger';
import { runWithMdc } from './mdc';

/** The lines a logger writes, in the given LOG_FORMAT. */
function capture(format: 'json' | 'pretty'): { logger: LoomLogger; lines: () => string[] } {
  let out = '';
  const destination = new Writable({
    write(chunk, _enc, done) {
      out += chunk.toString();
      done();
    },
  });
  // pino-pretty expects a sync-capable stream; a Writable with write() is enough for both.
  const logger = new LoomLogger(
    createPinoLogger({ service: 'orchestrator', level: 'info', format, destination }),
  );
  return { logger, lines: () => out.split('\n').filter(Boolean) };
}

describe('createPinoLogger', () => {
  it('json: one object a line, with the service, level and message, PII redacted', () => {
    const { logger, lines } = capture('json');
    logger.log('hello alice@example.com', 'TurnService');
    logger.warn({ msg: 'with fields', taskId: 't_1', phone: '13812345678' }, 'Executor');
    const [first, second] = lines().map((l) => JSON.parse(l));
    expect(first).toMatchObject({
      level: 'info',
      service: 'orchestrator',
      context: 'TurnService',
      msg: 'hello [REDACTED_EMAIL]',
    });
    expect(second).toMatchObject({ level: 'warn', taskId: 't_1', phone: '[REDACTED_PHONE]' });
  });

  it('json: keeps the stack Nest passes to error(message, stack, context), redacted', () => {
    const { logger, lines } = capture('json');
    // What Nest's own ExceptionHandler and Logger.error(message, stack) do.
    logger.error(
      'Unhandled error',
      'Error: no user 13812345678\n    at handler (x.js:1:1)',
      'Boot',
    );
    expect(JSON.parse(lines()[0])).toMatchObject({
      level: 'error',
      context: 'Boot',
      msg: 'Unhandled error',
      stack: 'Error: no user [REDACTED_PHONE]\n    at handler (x.js:1:1)',
    });
  });

  it("json: leaves out Nest's ExceptionHandler line (a start failure its main says once)", () => {
    const { logger, lines } = capture('json');
    logger.error(new Error('connect ECONNREFUSED'), 'ExceptionHandler');
    logger.error('kept', 'Boot');
    expect(lines().map((l) => JSON.parse(l).msg)).toEqual(['kept']);
  });

  it('pretty: a readable line per entry (time, level, service, context, message), PII redacted', () => {
    const { logger, lines } = capture('pretty');
    logger.log('hello alice@example.com', 'TurnService');
    logger.warn({ msg: 'with fields', taskId: 't_1', phone: '13812345678' }, 'Executor');
    const text = lines();
    expect(text[0]).toMatch(
      /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: \[orchestrator\] TurnService: hello \[REDACTED_EMAIL\]$/,
    );
    expect(() => JSON.parse(text[0])).toThrow();
    const warn = text.slice(1).join('\n');
    expect(warn).toMatch(/WARN: \[orchestrator\] Executor: with fields/);
    expect(warn).toContain('taskId: "t_1"');
    expect(warn).toContain('phone: "[REDACTED_PHONE]"');
    expect(warn).not.toContain('13812345678');
  });

  // A request's or an SDK's credentials logged as fields: only a few spellings of their names
  // were known, so `proxy-authorization`, `cookies` and `secretAccessKey` went out whole.
  it('json: replaces credential fields whole, however their names are spelt', () => {
    const { logger, lines } = capture('json');
    logger.warn(
      {
        msg: 'upstream refused',
        headers: { 'proxy-authorization': 'Basic YTpi', cookies: 'sid=abc', 'X-Api-Key': 'k1' },
        aws: { accessKeyId: 'id-1', secretAccessKey: 'wJalrXUtnFEMI', sessionToken: 'tok' },
        client_secret: 'c5',
      },
      'Upstream',
    );
    const line = lines()[0];
    for (const secret of ['YTpi', 'sid=abc', 'k1', 'wJalrXUtnFEMI', 'tok', 'c5'])
      expect(line).not.toContain(secret);
    expect(JSON.parse(line)).toMatchObject({
      headers: { 'proxy-authorization': '[REDACTED_API_KEY]', cookies: '[REDACTED_API_KEY]' },
      aws: { accessKeyId: 'id-1', secretAccessKey: '[REDACTED_API_KEY]' },
    });
  });

  it('json: redacts vendor tokens and an AWS secret key quoted in a message or an error', () => {
    const { logger, lines } = capture('json');
    const aws = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
    const webhook = 'T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX';
    logger.warn(`notify https://hooks.slack.com/services/${webhook}: 404`, 'Notifier');
    logger.error(new Error(`bad credentials AKIAIOSFODNN7EXAMPLE ${aws}`), 'Uploader');
    logger.log('clone with glpat-xYzAbCdEfGhIjKlMnOpQ', 'Git');
    const text = lines().join('\n');
    for (const secret of [aws, webhook, 'glpat-xYzAbCdEfGhIjKlMnOpQ'])
      expect(text).not.toContain(secret);
    expect(JSON.parse(lines()[0]).msg).toBe(
      'notify https://hooks.slack.com/services/[REDACTED_API_KEY]: 404',
    );
  });

  it('json: redacts a URL password with a space in it, in a message and an error', () => {
    const { logger, lines } = capture('json');
    logger.warn('cannot reach redis://default:open sesame@redis:6379', 'Boot');
    logger.error(new Error('mysql://loom:pa ss@db.example.com/loom refused'), 'Boot');
    const text = lines().join('\n');
    for (const part of ['open', 'sesame', 'pa ', 'ss@']) expect(text).not.toContain(part);
    expect(JSON.parse(lines()[0]).msg).toBe(
      'cannot reach redis://default:[REDACTED_PASSWORD]@redis:6379',
    );
  });

  // Which server was down is what an operator reads a connection warning for: the address was
  // masked in every line of our transport's and the store's connection errors.
  it("json: keeps a socket error's server address, and masks a user's address", () => {
    const { logger, lines } = capture('json');
    logger.warn('Redis client connection: connect ECONNREFUSED 127.0.0.1:6379', 'Transport');
    logger.error(new Error('connect ETIMEDOUT 10.0.3.7:3306'), 'TypeOrmModule');
    logger.log('user says: my address is 10.0.3.7, port 6379', 'TurnService');
    expect(lines().map((l) => JSON.parse(l).msg)).toEqual([
      'Redis client connection: connect ECONNREFUSED 127.0.0.1:6379',
      'connect ETIMEDOUT 10.0.3.7:3306',
      'user says: my address is [REDACTED_IP], port 6379',
    ]);
  });

  // A field holding a URL or a class instance was passed on untouched and written by its JSON:
  // `new URL(REDIS_URL)` printed its password, a settings object its secrets.
  it('json: redacts a URL instance and a class instance as their JSON holds them', () => {
    const { logger, lines } = capture('json');
    class Settings {
      host = 'redis';
      password = 'hunter2';
      owner = 'alice@example.com';
    }
    logger.warn(
      {
        msg: 'cannot reach',
        url: new URL('redis://default:s3cret-pass@redis:6379/0'),
        settings: new Settings(),
        at: new Date(0),
      },
      'Boot',
    );
    const line = lines()[0];
    for (const secret of ['s3cret-pass', 'hunter2', 'alice@example.com'])
      expect(line).not.toContain(secret);
    expect(JSON.parse(line)).toMatchObject({
      url: 'redis://default:[REDACTED_PASSWORD]@redis:6379/0',
      settings: { host: 'redis', password: '[REDACTED_PASSWORD]', owner: '[REDACTED_EMAIL]' },
      at: '1970-01-01T00:00:00.000Z',
    });
  });

  it('json: redacts a short key quoted with its header name in a message', () => {
    const { logger, lines } = capture('json');
    logger.warn('upstream 401; sent x-api-key: k1abc', 'Upstream');
    expect(JSON.parse(lines()[0]).msg).toBe('upstream 401; sent x-api-key: [REDACTED_API_KEY]');
  });

  // The hook redacted string arguments only: an object or number pino formats into the message
  // (`%j`, `%o`, `%d`) went into it as it was.
  it('json: redacts objects and numbers pino formats into the message', () => {
    const { logger, lines } = capture('json');
    logger.pino.warn(
      'settings %j, callback %d',
      { password: 'hunter2', owner: 'a@b.com' },
      13800138000,
    );
    const line = lines()[0];
    for (const secret of ['hunter2', 'a@b.com', '13800138000']) expect(line).not.toContain(secret);
    expect(JSON.parse(line).msg).toContain('"password":"[REDACTED_PASSWORD]"');
    // A number redacted to its placeholder is text: `%d` made it NaN, the rest stay numbers.
    expect(JSON.parse(line).msg).toMatch(/, callback \[REDACTED_PHONE\]$/);
    const format: string = '%d%% of %i, phone %f, %s';
    logger.pino.info({ at: 1 }, format, 12.5, 7, 13800138000, 'x');
    expect(JSON.parse(lines()[1]).msg).toBe('12.5% of 7, phone [REDACTED_PHONE], x');
    // Any other `%` and a character takes a value too, as pino reads it.
    const odd: string = '%x%d %d';
    logger.pino.info({ at: 2 }, odd, 1, 13800138000, 5);
    expect(JSON.parse(lines()[2]).msg).toBe('%x[REDACTED_PHONE] 5');
  });

  // Redacted as an object before pino wrote it with `%s`, an error was written `[object Object]`:
  // its message, what the line was for, was lost.
  it('json: writes an error formatted with %s as its text, redacted', () => {
    const { logger, lines } = capture('json');
    logger.pino.warn('retrying: %s', new Error('mysql://loom:hunter2@db refused'));
    logger.pino.warn({ at: 1 }, 'gave up on %s after %d tries', new TypeError('bad a@b.com'), 3);
    expect(lines().map((l) => JSON.parse(l).msg)).toEqual([
      'retrying: Error: mysql://loom:[REDACTED_PASSWORD]@db refused',
      'gave up on TypeError: bad [REDACTED_EMAIL] after 3 tries',
    ]);
  });

  // The embedded profile: one process, one logger for Nest's class loggers (the app created
  // last's), so a line names the service of the context it was written in.
  it.each(['json', 'pretty'] as const)(
    "%s: names the service of the CLS context, the logger's own outside one",
    (format) => {
      const { logger, lines } = capture(format);
      runWithMdc({ service: 'labor-law-agent', agentType: 'labor-law' }, () =>
        logger.log('executing', 'AgentRunner'),
      );
      logger.log('request completed', 'HTTP');
      const [agent, orchestrator] = lines().filter((l) => !l.startsWith(' '));
      if (format === 'pretty') {
        expect(agent).toContain('[labor-law-agent] AgentRunner: executing');
        expect(orchestrator).toContain('[orchestrator] HTTP: request completed');
      } else {
        expect(JSON.parse(agent)).toMatchObject({
          service: 'labor-law-agent',
          agentType: 'labor-law',
        });
        expect(JSON.parse(orchestrator).service).toBe('orchestrator');
        expect(agent.match(/"service":/g)).toHaveLength(1);
      }
    },
  );
});

// pino takes a line's message from an Error it is given (`pino.error(err)`, or `{ err }` without
// a `msg`, as Nest's logger passes an object), after the hook that redacts string arguments and
// outside the fields the formatter redacts: the line's `msg` carried the error's PII as it was.
describe('createPinoLogger: an error without a message of its own', () => {
  const message = 'could not reach alice@example.com at 13812345678';

  it.each([
    ['pino.error(err)', (l: LoomLogger) => l.pino.error(new Error(message))],
    ['pino.error({ err })', (l: LoomLogger) => l.pino.error({ err: new Error(message) })],
    ['logger.error({ err })', (l: LoomLogger) => l.error({ err: new Error(message) }, 'Ctx')],
    ['logger.warn({ err }) of a plain object', (l: LoomLogger) => l.warn({ err: { message } })],
  ])('%s: the msg is redacted like the fields', (_name, write) => {
    const { logger, lines } = capture('json');
    write(logger);
    const [line] = lines();
    expect(line).not.toContain('alice@example.com');
    expect(line).not.toContain('13812345678');
    expect(JSON.parse(line).msg).toBe('could not reach [REDACTED_EMAIL] at [REDACTED_PHONE]');
  });
});
