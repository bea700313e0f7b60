import { Logger } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
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
