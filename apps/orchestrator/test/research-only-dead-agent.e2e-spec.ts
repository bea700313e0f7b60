import request from 'supertest';
import { AGENT_REGISTRY, AgentRegistry, bootstrapAgent } from '@loom/agent-kit';
import { LEGAL_RESEARCH_DESCRIPTOR } from '../../legal-research-agent/src/legal-research.descriptor';
import { LegalResearchHandler } from '../../legal-research-agent/src/legal-research.handler';
import { AgentCatalog } from '../src/turn/agent-catalog';
import { InProcessOrchestrator, startInProcessOrchestrator } from './in-process.support';

/**
 * A message no specialist's keyword matches is researched only, its research steps required.
 * A research agent type stopped since (the catalog keeps it a week) must not fail that turn
 * while another research agent runs.
 */
describe('a research-only turn with a stopped research agent (HTTP, in-process)', () => {
  let orch: InProcessOrchestrator;
  beforeAll(async () => {
    orch = await startInProcessOrchestrator('researchdead', {
      env: { AGENT_TIMEOUT_MS: '1500' },
      agents: async (env) => [
        await bootstrapAgent(LEGAL_RESEARCH_DESCRIPTOR, LegalResearchHandler, env),
      ],
    });
  });
  afterAll(() => orch?.close());

  it('is answered by the research agent that runs', async () => {
    // Another research agent ran (the catalog saw it), then stopped.
    const registry = orch.get<AgentRegistry>(AGENT_REGISTRY);
    const stopped = {
      agentType: 'old-research',
      description: 'looks up case law',
      role: 'research' as const,
      intents: ['case-law'],
      keywords: ['precedent'],
    };
    await registry.heartbeat(stopped, 'old-1', Date.now());
    const seen = await orch.get(AgentCatalog).agents();
    expect(seen.live.has('old-research')).toBe(true);
    await registry.remove('old-research', 'old-1');

    const server = orch.app.getHttpServer();
    const auth = orch.auth('rita', 'tenant-research');
    const id = (await request(server).post('/v1/conversations').set('authorization', auth).send({}))
      .body.conversationId;
    const turn = await request(server)
      .post(`/v1/conversations/${id}/messages`)
      .set('authorization', auth)
      .send({ content: 'hello, a general question' });
    expect(turn.status).toBe(201);
    expect(turn.body.reply.agentType).toBe('legal-research');
  });
});
