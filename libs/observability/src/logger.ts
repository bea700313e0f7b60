import { LoggerService } from '@nestjs/common';
import { ClsServiceManager } from 'nestjs-cls';
import pino, { DestinationStream, Logger } from 'pino';
import pretty from 'pino-pretty';
import { redactDeep, redactPii } from '@loom/security';
import { MDC_FIELDS } from './cls-store';

export interface LogOptions {
  service: string;
  level: string;
  format: 'json' | 'pretty';
  /** Where lines go; stdout unless a test captures them. */
  destination?: DestinationStream;
}

/** The MDC fields of the current CLS context (empty outside one). */
export function currentMdc(): Record<string, string> {
  const out: Record<string, string> = {};
  try {
    const cls = ClsServiceManager.getClsService();
    if (!cls.isActive()) return out;
    for (const f of MDC_FIELDS) {
      const v = cls.get(f);
      if (typeof v === 'string') out[f] = v;
    }
  } catch {
    // no CLS in this process yet
  }
  return out;
}

/** The service the current CLS context's work belongs to (its `service`), or undefined. */
export function currentService(): string | undefined {
  try {
    const cls = ClsServiceManager.getClsService();
    if (!cls.isActive()) return undefined;
    const service: unknown = cls.get('service');
    return typeof service === 'string' ? service : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One JSON line per entry on stdout, stamped with the service and the MDC fields from CLS, and
 * with PII redacted from the message and every field (logs never carry PII). LOG_FORMAT=pretty
 * writes the same entries for people (pino-pretty: time, level, service, message, then fields).
 */
export function createPinoLogger(opts: LogOptions): Logger {
  const destination: DestinationStream | undefined =
    opts.format === 'pretty'
      ? pretty({
          destination: opts.destination ?? 1,
          sync: true,
          colorize: Boolean(process.stdout.isTTY),
          messageKey: 'msg',
          translateTime: 'SYS:HH:MM:ss.l',
          ignore: 'pid,hostname,service,context',
          messageFormat: '[{service}] {if context}{context}: {end}{msg}',
          hideObject: false,
        })
      : opts.destination;
  const options: pino.LoggerOptions = {
    level: opts.level,
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    messageKey: 'msg',
    // One process may host several apps (the embedded profile), and Nest's class loggers all
    // write through the logger of the app created last: the service comes from the context the
    // line was written in (an agent's execution names its agent), this logger's own otherwise.
    mixin: () => ({ service: currentService() ?? opts.service, ...currentMdc() }),
    formatters: {
      level: (label) => ({ level: label }),
      log: (obj) => redactDeep(obj) as Record<string, unknown>,
    },
    hooks: {
      logMethod(args, method) {
        // After the message come the values it formats (`%j`, `%o`, `%d`): objects and numbers too.
        const firstValue = typeof args[0] === 'string' ? 1 : 2;
        // The format as pino gets it (redacted, as every text is), and the values it formats.
        const format = args[firstValue - 1];
        const shown = typeof format === 'string' ? redactPii(format) : format;
        const slots = args.length > firstValue ? formatSlots(shown, firstValue) : [];
        const asText = new Set(slots.filter((s) => s.token === 's').map((s) => s.value));
        const redacted = args.map((a, i) =>
          i === firstValue - 1
            ? shown
            : typeof a === 'string'
              ? redactPii(a)
              : i < firstValue
                ? a
                : asText.has(i) && typeof a === 'object' && a !== null
                  ? redactPii(asString(a))
                  : redactDeep(a),
        );
        if (slots.length > 0)
          redacted[firstValue - 1] = retypeRedacted(shown, slots, args, redacted);
        const message = errorMessage(args);
        if (message !== undefined) redacted.splice(1, 0, redactPii(message));
        method.apply(this, redacted as Parameters<typeof method>);
      },
    },
  };
  return destination ? pino(options, destination) : pino(options);
}

/** A token of a line's format string that takes a value, and the index of that value. */
interface FormatSlot {
  at: number;
  token: string;
  value: number;
}

/**
 * The tokens of a line's format string that take a value, each with the index of its value in
 * the call's arguments, read as pino's formatter (quick-format-unescaped) reads it: any `%` and
 * a character but `%%` takes the next value, though only `%s %d %i %f %j %o %O` write it. A `%s`
 * writes String(value), an Error's name and message: such an object is redacted as that text
 * (redacted as an object first, it was written `[object Object]`, the error's message lost).
 */
function formatSlots(format: unknown, firstValue: number): FormatSlot[] {
  const slots: FormatSlot[] = [];
  if (typeof format !== 'string' || !format.includes('%')) return slots;
  let value = firstValue;
  for (let at = 0; at < format.length - 1; at++) {
    if (format[at] !== '%') continue;
    const token = format[at + 1];
    if (token === '%') {
      at++;
      continue;
    }
    const taken = value++;
    if (!'sdifjoO'.includes(token)) continue;
    slots.push({ at, token, value: taken });
    at++;
  }
  return slots;
}

/** String(value), as pino's `%s` writes it; a value that cannot be made text says so. */
function asString(value: object): string {
  try {
    return String(value);
  } catch {
    return '[Unreadable]';
  }
}

/**
 * `format` with its `%d`, `%i` and `%f` made `%s` where the number they format was redacted to
 * text (a phone number): formatted as a number, its placeholder read `NaN`.
 */
function retypeRedacted(
  format: unknown,
  slots: readonly FormatSlot[],
  args: readonly unknown[],
  redacted: readonly unknown[],
): unknown {
  let out = '';
  let from = 0;
  for (const { at, token, value } of slots) {
    if (!'dif'.includes(token)) continue;
    if (typeof args[value] !== 'number' || typeof redacted[value] !== 'string') continue;
    out += `${(format as string).slice(from, at)}%s`;
    from = at + 2;
  }
  return from === 0 ? format : out + (format as string).slice(from);
}

/**
 * The message pino would take for a line from the error it is given (`log.error(err)`, or
 * `{ err }` without a `msg`), or undefined when the line has a message of its own. pino reads it
 * after the hooks and apart from the fields the formatter redacts: it is given redacted instead.
 */
function errorMessage(args: readonly unknown[]): string | undefined {
  const [first] = args;
  if (args.length !== 1 || typeof first !== 'object' || first === null) return undefined;
  const { msg, err: field } = first as { msg?: unknown; err?: unknown };
  const err: unknown = first instanceof Error ? first : msg === undefined ? field : undefined;
  const message: unknown =
    typeof err === 'object' && err !== null ? (err as { message?: unknown }).message : undefined;
  return message === undefined ? undefined : String(message);
}

/** The context of Nest's log line when an app fails to start (`ExceptionsZone`). */
const NEST_START_FAILURE_CONTEXT = 'ExceptionHandler';

/** Nest's logger interface over pino, so framework logs are JSON lines with the MDC too. */
export class LoomLogger implements LoggerService {
  constructor(readonly pino: Logger) {}

  log(message: unknown, ...rest: unknown[]): void {
    this.write('info', message, rest);
  }
  /** Nest calls it as `error(message, stack?, context?)`: a stack becomes the line's `stack`. */
  error(message: unknown, ...rest: unknown[]): void {
    // Nest's ExceptionHandler logs only a failure of NestFactory's start, which every Loom main
    // (runAgent, the orchestrator's, the embedded one) reports itself in one line on stderr, and
    // which reaches a caller of bootstrapAgent or createOrchestrator as a rejection: not twice.
    if (rest.at(-1) === NEST_START_FAILURE_CONTEXT) return;
    const [stack] = rest;
    if (rest.length >= 2 && typeof stack === 'string' && typeof rest.at(-1) === 'string')
      return this.write('error', message, [{ stack }, ...rest.slice(1)]);
    this.write('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.write('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]): void {
    this.write('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]): void {
    this.write('trace', message, rest);
  }

  private write(
    level: 'info' | 'error' | 'warn' | 'debug' | 'trace',
    message: unknown,
    rest: unknown[],
  ): void {
    const context = typeof rest.at(-1) === 'string' ? (rest.at(-1) as string) : undefined;
    const fields = rest.find((r) => r && typeof r === 'object') as
      Record<string, unknown> | undefined;
    if (message instanceof Error) {
      this.pino[level](
        { context, ...fields, err: { name: message.name, message: message.message } },
        message.message,
      );
    } else if (typeof message === 'object' && message !== null) {
      this.pino[level]({ context, ...fields, ...(message as object) });
    } else {
      this.pino[level]({ context, ...fields }, String(message));
    }
  }
}
