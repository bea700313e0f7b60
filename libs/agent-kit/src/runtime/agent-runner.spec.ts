import { Logger } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { Writable } from 'stream';
import { createPinoLogger, LoomLogger } from '@loom/observability';
import { LoomError, LoomErrorCode } from '@loom/session';
import { MAX_ERROR_MESSAGE_CHARS } from '../contracts/agent-messages';
import { toRpc } from './agent-runner';

describe('toRpc: what a handler throws, as it leaves the agent', () => {
  const log = { warn: jest.fn(), error: jest.fn() } as unknown as Logger;
  const long = 'x'.repeat(50_000);
  const body = (err: RpcException) => err.getError() as Record<string, unknown>;

  it("cuts a handler's own RpcException message to 1,000 characters, keeping its code", () => {
    const out = body(toRpc(new RpcException({ code: 'TAX_RULES_MISSING', message: long }), log));
    expect(out.code).toBe('TAX_RULES_MISSING');
    expect(String(out.message)).toHaveLength(MAX_ERROR_MESSAGE_CHARS);
    expect(String(out.message).endsWith('…')).toBe(true);
  });

  it('cuts an RpcException of a bare string too', () => {
    expect(String(toRpc(new RpcException(long), log).getError())).toHaveLength(
      MAX_ERROR_MESSAGE_CHARS,
    );
  });

  it("cuts a LoomError's message", () => {
    const out = body(toRpc(new LoomError(LoomErrorCode.AGENT_FAILED, long), log));
    expect(out).toEqual({ code: LoomErrorCode.AGENT_FAILED, message: expect.any(String) });
    expect(String(out.message)).toHaveLength(MAX_ERROR_MESSAGE_CHARS);
  });

  it('passes a short RpcException on unchanged', () => {
    const err = new RpcException({ code: 'NOPE', message: 'short' });
    expect(toRpc(err, log)).toBe(err);
  });
});

describe('toRpc: a long error message quoting what the user wrote', () => {
  // A handler's error may quote the user's text (a legal question runs long). Its message is cut
  // to 1,000 characters before it is logged, answered and, on the orchestrator, logged again; a
  // cut inside a resident id or phone number left a part the log redaction no longer recognises.
  const id = '11010519491231002X';
  const quoting = `cannot parse the question: ${'事实'.repeat(474)}，我的身份证号码 ${id}，请帮我看看`;

  function logged(err: unknown): { line: string; body: unknown } {
    let out = '';
    const destination = new Writable({
      write(chunk, _enc, done) {
        out += chunk.toString();
        done();
      },
    });
    const log = new LoomLogger(
      createPinoLogger({ service: 'agent', level: 'info', format: 'json', destination }),
    ) as unknown as Logger;
    const body = toRpc(err, log).getError();
    return { line: out, body };
  }

  it('logs no part of a resident id the cut went through', () => {
    expect(quoting.indexOf(id)).toBeLessThan(MAX_ERROR_MESSAGE_CHARS);
    expect(quoting.indexOf(id) + id.length).toBeGreaterThan(MAX_ERROR_MESSAGE_CHARS);
    const { line } = logged(new Error(quoting));
    expect(line).toContain('cannot parse the question');
    expect(line).not.toContain(id.slice(0, 12));
  });

  it('logs no part of it in the stack, cut at 4,000 characters, either', () => {
    const deep = `cannot parse the question: ${'事'.repeat(3942)}，我的身份证号码 ${id}`;
    const err = new Error(deep);
    expect(err.stack!.indexOf(id)).toBeLessThan(4_000);
    expect(err.stack!.indexOf(id) + id.length).toBeGreaterThan(4_000);
    expect(logged(err).line).not.toContain(id.slice(0, 12));
  });

  it('answers no part of it in a message the orchestrator logs either', () => {
    const { body } = logged(new LoomError(LoomErrorCode.AGENT_FAILED, quoting));
    const { message } = body as { message: string };
    expect(message.length).toBeLessThanOrEqual(MAX_ERROR_MESSAGE_CHARS);
    expect(message).not.toContain(id.slice(0, 12));
  });
});
