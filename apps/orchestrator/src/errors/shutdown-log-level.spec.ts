import { ArgumentsHost, Logger, LoggerService } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import { Request, Response } from 'express';
import { LoomEnv } from '@loom/agent-kit';
import {
  ConversationRepository,
  LockHandle,
  LoomError,
  LoomErrorCode,
  TaskRepository,
  TaskSession,
} from '@loom/session';
import { ConversationsController } from '../conversations/conversations.controller';
import { MessageReadAdmission } from '../conversations/message-read-admission';
import { RequestLogMiddleware } from '../security/request-log.middleware';
import { TaskRun } from '../turn/task-run';
import { TurnAdmission } from '../turn/turn-admission';
import { TurnService } from '../turn/turn.service';
import { HttpErrorFilter } from './http-error.filter';

/** Every line logged, with its level and context. */
function captureLogs(): Array<{ level: string; context: string; msg: string }> {
  const lines: Array<{ level: string; context: string; msg: string }> = [];
  const at =
    (level: string) =>
    (msg: unknown, ...rest: unknown[]) =>
      lines.push({ level, context: String(rest[rest.length - 1]), msg: String(msg) });
  const logger: LoggerService = {
    log: at('info'),
    warn: at('warn'),
    error: at('error'),
    debug: at('debug'),
    verbose: at('verbose'),
  };
  Logger.overrideLogger(logger);
  return lines;
}

/** The error a turn's client gets when this orchestrator hands its task over at shutdown. */
async function handOverError(): Promise<unknown> {
  const tasks = { save: async () => undefined } as unknown as TaskRepository;
  const lock = { token: 't', fence: 1, release: async () => undefined };
  const task = { taskId: 't_1', lease: null } as unknown as TaskSession;
  const run = new TaskRun({ tenantId: 'x', userId: 'y' }, task, lock as unknown as LockHandle, {
    tasks,
    renewEveryMs: 1000,
    instanceId: 'orchestrator-1',
    log: new Logger('test'),
    leaseEnd: () => Date.now() + 600_000,
    now: () => Date.now(),
    onStop: () => undefined,
  });
  const work = run.guard(new Promise(() => undefined));
  await run.handOver();
  return work.then(
    () => undefined,
    (err: unknown) => err,
  );
}

/** A streamed turn (POST with Accept: text/event-stream) whose turn fails with `err`. */
async function streamedTurnFailing(err: unknown): Promise<string> {
  const turns = {
    assertStreamable: async () => undefined,
    turn: async () => Promise.reject(err),
  } as unknown as TurnService;
  const admission = { admit: () => () => undefined } as unknown as TurnAdmission;
  const controller = new ConversationsController(
    {} as ConversationRepository,
    turns,
    admission,
    {} as MessageReadAdmission,
    { SSE_KEEPALIVE_MS: 60_000 } as LoomEnv,
  );
  let written = '';
  const res = {
    status: () => res,
    setHeader: () => res,
    flushHeaders: () => undefined,
    on: () => res,
    once: () => res,
    destroyed: false,
    write: (chunk: string) => (written += chunk),
    end: () => undefined,
  } as unknown as Response;
  const req = { headers: { accept: 'text/event-stream' } } as unknown as Request;
  req.accepts = ((types: string[]) => types[1]) as Request['accepts'];
  await controller.post(
    { tenantId: 'x', userId: 'y' },
    'conv-0001',
    { content: 'hi' },
    'k1',
    req,
    res,
  );
  return written;
}

/** A JSON turn's failure through the error filter, then its access-log line. */
function jsonTurnFailing(err: unknown): void {
  const res = {
    statusCode: 200,
    headersSent: false,
    setHeader: () => res,
    status: (code: number) => ((res.statusCode = code), res),
    json: () => res,
    end: () => undefined,
    on: (event: string, fn: () => void) => event === 'finish' && finish.push(fn),
  };
  const finish: Array<() => void> = [];
  const req = { method: 'POST', url: '/v1/conversations/c1/messages', headers: {} };
  const cls = { isActive: () => false } as unknown as ClsService;
  new RequestLogMiddleware(cls).use(req, res, () => undefined);
  const host = {
    switchToHttp: () => ({ getResponse: () => res, getRequest: () => req }),
  } as unknown as ArgumentsHost;
  new HttpErrorFilter().catch(err, host);
  finish.forEach((fn) => fn());
}

describe('the log level of a turn this orchestrator hands over at shutdown', () => {
  afterEach(() => Logger.overrideLogger(new Logger()));

  it('is a warning on a streamed turn (expected noise pages nobody), with its 503 event', async () => {
    const err = await handOverError();
    const lines = captureLogs();
    const written = await streamedTurnFailing(err);
    expect(written).toContain('"statusCode":503');
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
    expect(lines).toContainEqual(
      expect.objectContaining({ level: 'warn', context: 'ConversationsController' }),
    );
  });

  it('is a warning on a JSON turn, in the error filter and in the access log', async () => {
    const err = await handOverError();
    const lines = captureLogs();
    jsonTurnFailing(err);
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
    expect(lines.map((l) => [l.level, l.context])).toEqual([
      ['warn', 'HttpErrorFilter'],
      ['warn', 'HTTP'],
    ]);
  });

  it('leaves a 503 that is a fault (a store out of reach) an error, streamed or not', async () => {
    const fault = new LoomError(LoomErrorCode.UNAVAILABLE, 'redis is down');
    const lines = captureLogs();
    await streamedTurnFailing(fault);
    jsonTurnFailing(fault);
    expect(lines.map((l) => [l.level, l.context])).toEqual([
      ['error', 'ConversationsController'],
      ['error', 'HttpErrorFilter'],
      ['error', 'HTTP'],
    ]);
  });
});
