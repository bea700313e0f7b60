import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { loadEnvOrExit } from '@loom/agent-kit';
import { createOrchestrator } from './bootstrap';

async function main(): Promise<void> {
  const env = loadEnvOrExit();
  const app = await createOrchestrator(env);
  await app.listen(env.PORT, '0.0.0.0');
  new Logger('Bootstrap').log(
    `orchestrator listening on port ${env.PORT}, all interfaces (API docs at /docs)`,
  );
}

main().catch((err) => {
  process.stderr.write(
    `loom orchestrator: failed to start: ${err instanceof Error ? err.message : String(err)}\n`,
  );
  process.exit(1);
});
