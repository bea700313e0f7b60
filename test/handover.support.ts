import { AppProcess, client, RunningSystem, startSystem } from './system';
import { logLines, waitFor } from './faults.support';
import { startOrchestrator } from './rolling.support';
const { freePort, stopAll } = require('../scripts/lib/processes');

/**
 * The system the hand-over suites stop replicas of: `replicas` orchestrators (replica 0 on the
 * system's own port), every agent once, and a specialist whose model takes `specialistMs`.
 */
export async function startReplicas(opts: {
  replicas: number;
  env: Record<string, string>;
  specialistMs?: number;
  appEnv?: Record<string, Record<string, string>>;
}): Promise<{ sys: RunningSystem; ports: number[] }> {
  const specialist: Record<string, string> =
    opts.specialistMs === undefined ? {} : { LLM_OFFLINE_DELAY_MS: String(opts.specialistMs) };
  const sys = await startSystem({
    env: { LOOM_RATE_LIMIT_PER_MINUTE: '0', ...opts.env },
    appEnv: { 'labor-law-agent': specialist, ...opts.appEnv },
  });
  const ports = [Number(new URL(sys.base).port)];
  for (let i = 1; i < opts.replicas; i++) {
    ports.push(await freePort());
    await startOrchestrator(sys, ports[i]);
  }
  return { sys, ports };
}

/** The orchestrator replica listening on `port`. */
export function orchestratorOn(sys: RunningSystem, port: number): AppProcess {
  return sys
    .processes('orchestrator')
    .find((c) => c.lines.some((l) => l.includes(`listening on port ${port}`))) as AppProcess;
}

/** Waits until the specialist works on a turn of `conversationId`; its log line (with taskId). */
export async function specialistAtWork(
  sys: RunningSystem,
  conversationId: string,
): Promise<Record<string, any>> {
  const [working] = await waitFor(
    () => {
      const lines = logLines(sys, 'labor-law-agent', 'executing', { conversationId });
      return lines.length ? lines : null;
    },
    { what: 'the specialist at work', intervalMs: 10, timeoutMs: 15_000 },
  );
  return working;
}

/** A turn's outcome as a client sees it: its status and code, or the network error's code. */
export function outcome(
  reply: Promise<{ status: number; body: any }>,
): Promise<{ status: number | string; code: string | null }> {
  return reply.then(
    (r) => ({ status: r.status as number | string, code: r.body?.code }),
    (err) => ({ status: (err.cause?.code ?? err.name) as number | string, code: null }),
  );
}

/**
 * A consultation turn sent through replica 0 (`ports[0]`), whose orchestrator is sent SIGTERM
 * once the specialist works on it and killed `graceMs` later. `key`: its Idempotency-Key.
 */
export async function turnStoppedMidway(
  sys: RunningSystem,
  ports: number[],
  turn: { tenant: string; graceMs: number; key?: string },
) {
  const alice = client(sys.base, sys.token(turn.tenant, 'alice'));
  const other = client(`http://127.0.0.1:${ports[1]}`, sys.token(turn.tenant, 'alice'));
  const conversationId = (await alice('POST', '/v1/conversations', {})).body.conversationId;
  const content = '我跟公司签的劳动合同有问题';
  const headers: Record<string, string> = turn.key ? { 'idempotency-key': turn.key } : {};
  const first = outcome(
    alice('POST', `/v1/conversations/${conversationId}/messages`, { content }, headers),
  );
  const taskId = (await specialistAtWork(sys, conversationId)).taskId as string;
  const stopping = orchestratorOn(sys, ports[0]);
  const stoppedAt = Date.now();
  await stopAll([stopping], 'SIGTERM', turn.graceMs);
  sys.children = sys.children.filter((c) => c !== stopping);
  return { alice, other, conversationId, content, taskId, first, stopping, stoppedAt };
}
