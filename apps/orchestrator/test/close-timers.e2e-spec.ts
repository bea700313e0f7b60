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
 * returned (orchestrator and an agent, on real MySQL and Redis), no timer they started is still
 * pending, nor one of a command they sent (ioredis's socketTimeout of a blocked read). A close that leaves a wait of its own running (a race lost by a timer nobody
 * clears) holds a stopping process, or a test runner's worker, open for as long again.
 */
describe('closing the orchestrator and an agent (in-process)', () => {
  it('leaves no timer of its own pending', async () => {
    // From the start: a blocked read's socket timeout is armed long before the close.
    const timers = trackTimers();
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
    try {
      await orch.close();
      expect(timers.live()).toEqual([]);
    } finally {
      timers.restore();
    }
  });
});
