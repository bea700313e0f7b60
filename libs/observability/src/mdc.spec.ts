import { ClsServiceManager } from 'nestjs-cls';
import { currentMdc } from './logger';
import { pickMdc, runWithMdc } from './mdc';

describe('pickMdc', () => {
  it('keeps well-formed MDC fields and drops the rest', () => {
    expect(
      pickMdc({
        correlationId: 'req-1',
        conversationId: 'c_abcdefgh',
        taskId: '../../etc',
        agentType: 'x'.repeat(200),
        tenantId: 42,
        other: 'ignored',
      }),
    ).toEqual({ correlationId: 'req-1', conversationId: 'c_abcdefgh' });
    expect(pickMdc(null)).toEqual({});
    expect(pickMdc('meta')).toEqual({});
  });

  // A token's tenant may be any principal the session library takes; one the MDC dropped left
  // every log line of that tenant's turns, and its agents' lines, without it.
  it('keeps every tenant id a token may carry', () => {
    for (const tenantId of ['auth0|5f7c8ec7', 'org+eu', 'acme.example@idp:1'])
      expect(pickMdc({ tenantId })).toEqual({ tenantId });
    expect(pickMdc('meta')).toEqual({});
  });
});

describe('runWithMdc', () => {
  it('gives the callback a context whose fields every log line picks up, nested or not', async () => {
    expect(ClsServiceManager.getClsService().isActive()).toBe(false);
    const seen = await runWithMdc({ correlationId: 'recovery-1', tenantId: 't1' }, async () => {
      await new Promise((r) => setTimeout(r, 1));
      const inner = runWithMdc({ taskId: 't_12345678' }, () => currentMdc());
      return { outer: currentMdc(), inner };
    });
    expect(seen.outer).toEqual({ correlationId: 'recovery-1', tenantId: 't1' });
    expect(seen.inner).toEqual({
      correlationId: 'recovery-1',
      tenantId: 't1',
      taskId: 't_12345678',
    });
    expect(currentMdc()).toEqual({});
  });
});
