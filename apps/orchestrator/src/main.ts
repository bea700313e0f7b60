import 'reflect-metadata';
import { loadEnvOrExit } from '@loom/agent-kit';
import { createOrchestrator } from './bootstrap';

async function main(): Promise<void> {
  const env = loadEnvOrExit();
  const app = await createOrchestrator(env);
  await app.listen(env.PORT, '0.0.0.0');
}

main().catch((err) => {
  process.stderr.write(
    `loom orchestrator: failed to start: ${err instanceof Error ? err.message : String(err)}\n`,
  );
  process.exit(1);
});
