import { HttpException } from '@nestjs/common';
import { LoomError, LoomErrorCode } from '@loom/session';
import { agentCallOutcome, LabelFolder, OTHER, turnOutcome } from './metric-labels';

describe('LabelFolder', () => {
  it('keeps the first values by name and folds every later one into other, for good', () => {
    const folder = new LabelFolder(2);
    expect(['labor-law', 'contract-law', 'tax-law'].map((t) => folder.label(t))).toEqual([
      'labor-law',
      'contract-law',
      OTHER,
    ]);
    // A value kept stays kept; a folded one stays folded, so a series never changes its name.
    expect(folder.label('contract-law')).toBe('contract-law');
    expect(folder.label('tax-law')).toBe(OTHER);
    expect(folder.label('a'.repeat(64))).toBe(OTHER);
  });
});

describe('turnOutcome', () => {
  it("is the code the client was answered with, internal ones as API.md's", () => {
    const error = (code: LoomErrorCode) => new LoomError(code, 'x');
    expect(turnOutcome(error(LoomErrorCode.AGENT_FAILED))).toBe('AGENT_FAILED');
    expect(turnOutcome(error(LoomErrorCode.TIMEOUT))).toBe('TIMEOUT');
    expect(turnOutcome(error(LoomErrorCode.UNAVAILABLE))).toBe('UNAVAILABLE');
    expect(turnOutcome(error(LoomErrorCode.LOCK_TIMEOUT))).toBe('CONFLICT');
    expect(turnOutcome(error(LoomErrorCode.STALE_FENCING_TOKEN))).toBe('CONFLICT');
    expect(turnOutcome(error(LoomErrorCode.PAYLOAD_TOO_LARGE))).toBe('PAYLOAD_TOO_LARGE');
  });

  it('never takes free text for a label value', () => {
    expect(turnOutcome(new Error('connect ECONNREFUSED 10.0.0.7:3306'))).toBe('INTERNAL');
    // An exception carrying a code of its own that is not one of the API's.
    const odd = new HttpException({ code: 'tenant-acme-broke', message: 'm' }, 400);
    expect(turnOutcome(odd)).toBe('INTERNAL');
    expect(turnOutcome(undefined)).toBe('INTERNAL');
  });
});

describe('agentCallOutcome', () => {
  it("is the agent call's error code, and AGENT_FAILED for anything that is not a known one", () => {
    expect(agentCallOutcome(new LoomError(LoomErrorCode.TIMEOUT, 'x'))).toBe('TIMEOUT');
    expect(agentCallOutcome(new LoomError(LoomErrorCode.ASSIGNMENT_REJECTED, 'x'))).toBe(
      'ASSIGNMENT_REJECTED',
    );
    expect(agentCallOutcome(new LoomError('NO_SUCH_CODE' as LoomErrorCode, 'x'))).toBe(
      'AGENT_FAILED',
    );
    expect(agentCallOutcome({ code: 'TIMEOUT' })).toBe('AGENT_FAILED');
  });
});
