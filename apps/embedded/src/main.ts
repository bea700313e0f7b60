import 'reflect-metadata';
import { bootstrapAgent, loadEnvOrExit } from '@loom/agent-kit';
import { CONTRACT_LAW_DESCRIPTOR } from '../../contract-law-agent/src/contract-law.descriptor';
import { ContractLawHandler } from '../../contract-law-agent/src/contract-law.handler';
import { LABOR_LAW_DESCRIPTOR } from '../../labor-law-agent/src/labor-law.descriptor';
import { LaborLawHandler } from '../../labor-law-agent/src/labor-law.handler';
import { LEGAL_RESEARCH_DESCRIPTOR } from '../../legal-research-agent/src/legal-research.descriptor';
import { LegalResearchHandler } from '../../legal-research-agent/src/legal-research.handler';
import { createOrchestrator } from '../../orchestrator/src/bootstrap';

/**
 * The embedded profile (DESIGN.md §10): every app in one process, JSON-file store, in-process
 * registry, Nest's TCP transport between orchestrator and agents; only Node is needed.
 */
async function main(): Promise<void> {
  const env = loadEnvOrExit({ LOOM_PROFILE: 'embedded' });
  process.stdout.write(
    `loom: embedded profile (JSON files in ${env.LOOM_DATA_DIR}, TCP transport, no Redis or MySQL)\n`,
  );
  await bootstrapAgent(LEGAL_RESEARCH_DESCRIPTOR, LegalResearchHandler, env);
  await bootstrapAgent(LABOR_LAW_DESCRIPTOR, LaborLawHandler, env);
  await bootstrapAgent(CONTRACT_LAW_DESCRIPTOR, ContractLawHandler, env);
  const app = await createOrchestrator(env);
  await app.listen(env.PORT, '127.0.0.1');
}

main().catch((err) => {
  process.stderr.write(
    `loom embedded: failed to start: ${err instanceof Error ? err.message : String(err)}\n`,
  );
  process.exit(1);
});
