import { INestMicroservice } from '@nestjs/common';
import { AgentDefinition, bootstrapAgent, LoomEnv } from '@loom/agent-kit';

/**
 * Starts every agent of the embedded profile in this process, in the order given. One process
 * hosts them all, so AGENT_PORT cannot be each one's port: the first listens on it and each next
 * one on the port after (0: every agent on a free port of its own). One that fails to start
 * stops those started before it.
 */
export async function startEmbeddedAgents(
  agents: AgentDefinition[],
  env: LoomEnv,
): Promise<INestMicroservice[]> {
  const base = env.AGENT_PORT;
  if (base && base + agents.length - 1 > 65535)
    throw new Error(`AGENT_PORT ${base} leaves no port for each of the ${agents.length} agents`);
  const started: INestMicroservice[] = [];
  try {
    for (const [i, agent] of agents.entries())
      started.push(await bootstrapAgent(agent, { ...env, AGENT_PORT: base && base + i }));
  } catch (err) {
    await Promise.allSettled(started.map((a) => a.close()));
    throw err;
  }
  return started;
}
