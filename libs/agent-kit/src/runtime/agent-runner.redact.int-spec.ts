import { Injectable } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { AgentHarness } from '@loom/testing';
import { ExecutionStatus, newId, SessionContext } from '@loom/session';
import { AgentHandler } from './agent-handler';

const EMAIL = 'alice.rowe@example.com';

/** Fails quoting its question, as a handler that echoes what it could not do may. */
@Injectable()
class QuotingHandler implements AgentHandler {
  handle(ctx: SessionContext): Promise<never> {
    if (ctx.question.startsWith('rpc'))
      throw new RpcException({ code: 'AGENT_FAILED', message: `cannot mail ${EMAIL}` });
    throw new Error(`cannot mail ${EMAIL}`);
  }
}

/**
 * With LOOM_REDACT_STORED the user's PII is redacted before it is stored: an agent's error,
 * which may quote what the user wrote, used to be stored as it was (`lastError`).
 */
describe('AgentRunner with LOOM_REDACT_STORED (real Redis Streams, MySQL)', () => {
  let harness: AgentHarness;
  const owner = { tenantId: 'tenant-quoting', userId: 'quinn' };

  beforeAll(async () => {
    harness = await AgentHarness.start(
      {
        agentType: 'quoting',
        description: 'test agent: fails quoting its question',
        role: 'specialist',
        intents: ['quoting'],
        keywords: [],
      },
      QuotingHandler,
      { LOOM_REDACT_STORED: 'true' },
    );
  });
  afterAll(() => harness?.stop());

  it.each(['rpc', 'error'])(
    'stores and answers the error of a failed execution redacted (%s)',
    async (question) => {
      const task = await harness.seed(owner, [], question);
      const agentSessionId = newId('a');
      const failed = await harness.execute(harness.request(owner, task, agentSessionId, 'en')).then(
        () => null,
        (err: unknown) => err as { code: string; message: string },
      );
      expect(failed?.code).toBe('AGENT_FAILED');
      expect(failed?.message).not.toContain(EMAIL);
      const session = await harness.tasks.agentSession(owner, task.conversationId, agentSessionId);
      expect(session).toMatchObject({ status: ExecutionStatus.FAILED });
      expect(session!.lastError).toContain('cannot mail');
      expect(session!.lastError).not.toContain(EMAIL);
      expect(session!.lastError).toContain('[REDACTED_EMAIL]');
    },
  );
});
