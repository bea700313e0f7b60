import 'reflect-metadata';
import { AddressInfo } from 'net';
import { Logger } from '@nestjs/common';
import { loadEnvOrExit } from '@loom/agent-kit';
import { handleProcessErrors } from '@loom/observability';
import { redactedReason } from '@loom/security';
import { EMBEDDED_JWT_SECRET } from './app.module';
import { createOrchestrator } from './bootstrap';

async function main(): Promise<void> {
  const env = loadEnvOrExit();
  // A promise that fails unawaited is logged (JSON, redacted); it does not end the process.
  handleProcessErrors();
  const app = await createOrchestrator(env);
  // Without a secret of its own (embedded profile), anyone could mint tokens with the built-in
  // one, printed in the source: then this machine alone may call it.
  const publicSecret = !env.LOOM_JWT_SECRET || env.LOOM_JWT_SECRET === EMBEDDED_JWT_SECRET;
  await app.listen(env.PORT, publicSecret ? '127.0.0.1' : '0.0.0.0');
  // PORT=0 takes any free port: name the one taken.
  const { port } = app.getHttpServer().address() as AddressInfo;
  new Logger('Bootstrap').log(
    publicSecret
      ? `orchestrator listening on port ${port}, loopback interface only: no LOOM_JWT_SECRET of its own (API docs at /docs)`
      : `orchestrator listening on port ${port}, all interfaces (API docs at /docs)`,
  );
}

main().catch((err) => {
  process.stderr.write(`loom orchestrator: failed to start: ${redactedReason(err)}\n`);
  process.exit(1);
});
