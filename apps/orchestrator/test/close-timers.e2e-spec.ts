import { Injectable } from '@nestjs/common';
import { AgentHandler, bootstrapAgent } from '@loom/agent-kit';
import { trackTimers } from '@loom/testing';
import { startInProcessOrchestrator } from './in-process.support';

@Injectable()
class EchoHandler implements AgentHandler {
  async handle(): Promise<any> {
    return { answer: 'echo', usage: { promptTokens: 1, completionTokens: 1, costUsd: 0 } };
  }
}

/**
 * A graceful close leaves nothing behind that keeps the process alive: once app.close() has
 * returned (orchestrator and an agent, on real MySQL and Redis), no timer it started is still
 * pending. A close that leaves a wait of its own running (a race lost by a timer nobody
 * clears) holds a stopping process, or a test runner's worker, open for as long again.
 */
describe('closing the orchestrator and an agent (in-process)', () => {
  it('leaves no timer of its own pending', async () => {
    const orch = await startInProcessOrchestrator('closetimers', {
      agents: async (env) => [
        await bootstrapAgent(
          {
            agentType: 'echo',
            description: 'echoes',
            role: 'specialist',
            intents: ['echo'],
            keywords: ['echo'],
          },
          EchoHandler,
          env,
        ),
      ],
    });
    const timers = trackTimers();
    try {
      await orch.close();
      expect(timers.live()).toEqual([]);
    } finally {
      timers.restore();
    }
  });
});
