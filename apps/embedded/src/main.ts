import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { existsSync, readdirSync } from 'fs';
import { AddressInfo } from 'net';
import { join } from 'path';
import { AgentDefinition, loadEnvOrExit } from '@loom/agent-kit';
import { handleProcessErrors } from '@loom/observability';
import { redactedReason } from '@loom/security';
import { createOrchestrator } from '../../orchestrator/src/bootstrap';
import { startEmbeddedAgents } from './embedded-agents';

/** apps/ (or dist/apps/ when built): every app beside this one that defines an agent. */
const APPS_DIR = join(__dirname, '..', '..');

/** Every `apps/<name>/src/agent` in name order, so a scaffolded agent runs here too. */
function agentApps(): { app: string; agent: AgentDefinition }[] {
  return readdirSync(APPS_DIR, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== 'embedded')
    .map((d) => d.name)
    .sort()
    .filter((app) =>
      ['agent.js', 'agent.ts'].some((f) => existsSync(join(APPS_DIR, app, 'src', f))),
    )
    .map((app) => ({
      app,
      agent: (require(join(APPS_DIR, app, 'src', 'agent')) as { AGENT: AgentDefinition }).AGENT,
    }));
}

/**
 * The embedded profile (DESIGN.md §10): every app in one process, JSON-file store, in-process
 * registry, Nest's TCP transport between orchestrator and agents; only Node is needed.
 */
async function main(): Promise<void> {
  const env = loadEnvOrExit({ LOOM_PROFILE: 'embedded' });
  // One process for every app: an agent handler's promise that fails unawaited is logged; it
  // does not end the orchestrator and every other agent with it.
  handleProcessErrors();
  const agents = agentApps();
  process.stdout.write(
    `loom: embedded profile (JSON files in ${env.LOOM_DATA_DIR}, TCP transport, no Redis or MySQL); agents: ${agents.map((a) => a.app).join(', ')}\n`,
  );
  for (const { app, agent } of agents)
    if (!agent?.descriptor || !agent.handler)
      throw new Error(`apps/${app}/src/agent exports no AGENT`);
  await startEmbeddedAgents(
    agents.map((a) => a.agent),
    env,
  );
  const app = await createOrchestrator(env);
  await app.listen(env.PORT, '127.0.0.1');
  // PORT=0 takes any free port: name the one taken.
  const { port } = app.getHttpServer().address() as AddressInfo;
  new Logger('Bootstrap').log(
    `orchestrator listening on port ${port}, loopback only (API docs at /docs)`,
  );
}

main().catch((err) => {
  process.stderr.write(`loom embedded: failed to start: ${redactedReason(err)}\n`);
  process.exit(1);
});
