import { Injectable } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import { emptyUsage } from '@loom/session';
import { AgentHandler } from './agent-handler';

@Injectable()
class EchoHandler implements AgentHandler {
  handle() {
    return Promise.resolve({ answer: 'done', usage: emptyUsage(), sharedKeysWritten: [] });
  }
}

/** `levels` objects, each holding the next: `{ a: { a: … 1 } }`. */
function nested(levels: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < levels; i++) value = { a: value };
  return value;
}

/**
 * An execute payload the agent refuses gets a typed RPC error (docs/security.md, input
 * hardening: `VALIDATION_FAILED` or `PAYLOAD_TOO_LARGE`), never the transport's untyped
 * "Internal server error", and the agent goes on serving.
 */
describe('agent execute payloads past the limits (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-payload', userId: 'pat' };

  beforeAll(async () => {
    agent = await AgentHarness.start(
      {
        agentType: 'payload-echo',
        description: 'test agent: answers done',
        role: 'specialist',
        intents: ['payload-echo'],
        keywords: [],
      },
      EchoHandler,
    );
  });
  afterAll(() => agent?.stop());

  it.each(['meta', 'assignment', 'top'] as const)(
    'refuses JSON nested thousands of levels deep (in %s) with VALIDATION_FAILED',
    async (where) => {
      const task = await agent.seed(owner, [], 'deep');
      const request = agent.request(owner, task);
      const deep = nested(3_000);
      const payload =
        where === 'top'
          ? { ...request, extra: deep }
          : { ...request, [where]: { ...request[where], extra: deep } };
      await expect(agent.execute(payload)).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
      expect((await agent.execute(request)).output).toBe('done');
    },
  );

  it('refuses a payload of more than 10,000 JSON values with PAYLOAD_TOO_LARGE', async () => {
    const task = await agent.seed(owner, [], 'many');
    const request = agent.request(owner, task);
    const payload = { ...request, meta: { ...request.meta, extra: new Array(20_000).fill(0) } };
    await expect(agent.execute(payload)).rejects.toMatchObject({ code: 'PAYLOAD_TOO_LARGE' });
    expect((await agent.execute(request)).output).toBe('done');
  });

  // Parsed whole before any pipe ran: a payload of hundreds of megabytes could exhaust the
  // agent's memory, and its redeliveries each instance that took it over.
  it('refuses a payload over 256 KB of JSON with PAYLOAD_TOO_LARGE, without parsing it', async () => {
    const task = await agent.seed(owner, [], 'huge');
    const request = agent.request(owner, task);
    const payload = { ...request, meta: { ...request.meta, junk: 'x'.repeat(300 * 1024) } };
    await expect(agent.execute(payload)).rejects.toMatchObject({ code: 'PAYLOAD_TOO_LARGE' });
    expect((await agent.execute(request)).output).toBe('done');
  });
});
