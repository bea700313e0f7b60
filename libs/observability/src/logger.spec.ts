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
