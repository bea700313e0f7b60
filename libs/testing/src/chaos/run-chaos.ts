import { sleep } from '../private-redis';
import { ChaosCluster } from './chaos-cluster';
import { ChaosConversation, ClientCounts, ClientViolation } from './chaos-client';
import { checkInvariants, openWork, Violation } from './chaos-invariants';
import { ChaosKiller, KillCounts } from './chaos-killer';
import { SeededRandom } from './random';

export interface ChaosOptions {
  seed: number;
  /** How long the clients send turns while the killer works. */
  durationMs: number;
  conversations?: number;
  /** A private three-master Redis Cluster instead of one redis-server. */
  redisCluster?: boolean;
  /** The longest the quiet period waits for recovery to close every task. */
  quietMs?: number;
  log?: (line: string) => void;
}

export interface ChaosReport {
  seed: number;
  redis: string;
  durationMs: number;
  turnsAcked: number;
  messagesUnacked: number;
  clients: ClientCounts;
  kills: KillCounts;
  processStarts: number;
  longestStopMs: Record<string, number>;
  executions: { ids: number; runs: number; stored: number };
  recoveredWithinMs: number | null;
  errorLogs: Record<string, number>;
  /** The first line of each error message logged, whole (a stack included). */
  errorSamples: string[];
  nonJsonLogs: Record<string, number>;
  violations: Violation[];
}

/** Settings that make recovery happen within seconds (docs/configuration.md). */
export function chaosEnv(rnd: SeededRandom): Record<string, string> {
  return {
    LLM_OFFLINE_DELAY_MS: String(rnd.int(50, 400)),
    TASK_LEASE_MS: '3000',
    RECOVERY_INTERVAL_MS: '1000',
    AGENT_TIMEOUT_MS: '8000',
    AGENT_MAX_EXECUTION_MS: '20000',
    AGENT_CLAIM_IDLE_MS: '2000',
    SHUTDOWN_HANDOVER_MS: '2000',
  };
}

/**
 * The randomized crash audit: clients send turns through two orchestrators while a killer
 * SIGKILLs and SIGSTOPs processes (and pauses Redis, stops MySQL); then, after a quiet period,
 * every invariant of "loses nothing when a process dies" is checked.
 */
export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? (() => undefined);
  const rnd = new SeededRandom(opts.seed);
  const killRnd = rnd.fork(1);
  const env = chaosEnv(rnd.fork(2));
  log(`seed ${opts.seed}: starting the apps (${JSON.stringify(env)})`);
  const cluster = await ChaosCluster.start(env, { redisCluster: opts.redisCluster });
  log(`  on ${cluster.redis.describe}`);
  try {
    const token = cluster.token('chaos-tenant', 'chaos-user');
    const counts: ClientCounts = {
      statuses: {},
      connectionErrors: 0,
      retriesSameKey: 0,
      newKeys: 0,
      agentFailed: {},
      doubleSends: 0,
    };
    const clientViolations: ClientViolation[] = [];
    const conversations = Array.from(
      { length: opts.conversations ?? 6 },
      (_, i) =>
        new ChaosConversation(
          i,
          cluster.bases,
          token,
          rnd.fork(100 + i),
          counts,
          clientViolations,
          {
            hangMs: 90_000,
            giveUpMs: 180_000,
          },
        ),
    );
    const killer = new ChaosKiller(cluster, killRnd);
    const deadline = Date.now() + opts.durationMs;
    const killing = killer.run();
    const progress = setInterval(
      () =>
        log(
          `  ${Math.round((deadline - Date.now()) / 1000)} s left: ${conversations.reduce((n, c) => n + c.record.acked.length, 0)} turns acked, kills ${JSON.stringify(killer.counts)}`,
        ),
      30_000,
    );
    const sending = Promise.all(conversations.map((c) => c.run(() => Date.now() > deadline)));
    await sleep(opts.durationMs);
    killer.stop();
    await killing;
    await cluster.heal();
    log('killer stopped; every process runs again; waiting for the turns in flight');
    await sending;
    clearInterval(progress);

    const quietStarted = Date.now();
    let recoveredWithinMs: number | null = null;
    while (Date.now() - quietStarted < (opts.quietMs ?? 60_000)) {
      const open = await openWork(cluster.mysqlUrl);
      if (!open.running.length && !open.runIndex) {
        recoveredWithinMs = Date.now() - quietStarted;
        break;
      }
      await sleep(500);
    }
    // Whatever closing a task does after its last durable write (agent-session deletion) settles.
    await sleep(3_000);
    const violations: Violation[] = [
      ...clientViolations,
      ...(await checkInvariants(
        cluster,
        conversations.map((c) => c.record),
        token,
      )),
    ];
    for (const [id, runs] of cluster.tally.executed)
      if (runs.length > 1)
        violations.push({
          conversationId: null,
          what: `execution ${id} (task ${String(runs[0].taskId)}) stored its work ${runs.length} times: ${runs.map((r) => r.slot).join(', ')}`,
        });
    // A crash trace or an unhandled rejection is printed outside the JSON logger, or names itself.
    for (const [line, n] of cluster.tally.nonJson)
      violations.push({ conversationId: null, what: `${n}x output outside the JSON log: ${line}` });
    for (const [line, n] of cluster.tally.errors)
      if (/unhandled|uncaught/i.test(line))
        violations.push({ conversationId: null, what: `${n}x ${line}` });
    for (const e of cluster.exits)
      violations.push({
        conversationId: null,
        what: `${e.slot} exited on its own or stopped badly (code ${e.code}, signal ${e.signal}); last lines:\n${e.lastLines.slice(-8).join('\n')}`,
      });
    const executed = [...cluster.tally.executed.values()];
    return {
      seed: opts.seed,
      redis: opts.redisCluster ? 'cluster' : 'standalone',
      durationMs: opts.durationMs,
      turnsAcked: conversations.reduce((n, c) => n + c.record.acked.length, 0),
      messagesUnacked: conversations.reduce((n, c) => n + c.record.unacked.length, 0),
      clients: counts,
      kills: killer.counts,
      processStarts: cluster.slots.reduce((n, s) => n + s.starts, 0),
      longestStopMs: cluster.stopMs,
      executions: {
        ids: cluster.tally.executing.size,
        runs: [...cluster.tally.executing.values()].reduce((a, b) => a + b, 0),
        stored: executed.reduce((n, r) => n + r.length, 0),
      },
      recoveredWithinMs,
      errorLogs: Object.fromEntries(cluster.tally.errors),
      errorSamples: [...cluster.tally.errorSamples.values()],
      nonJsonLogs: Object.fromEntries(cluster.tally.nonJson),
      violations,
    };
  } finally {
    await cluster.stop();
  }
}

/** The report as lines for a person: counts first, then every violated invariant. */
export function formatReport(r: ChaosReport): string {
  const lines = [
    `chaos seed ${r.seed} (${r.redis} Redis), ${Math.round(r.durationMs / 1000)} s: ${r.turnsAcked} turns acknowledged, ${r.messagesUnacked} sent again under a new key or never acknowledged`,
    `  responses ${JSON.stringify(r.clients.statuses)}, connection errors ${r.clients.connectionErrors}, same-key retries ${r.clients.retriesSameKey}, new keys ${r.clients.newKeys}, double sends ${r.clients.doubleSends}`,
    `  502s ${JSON.stringify(r.clients.agentFailed)}`,
    `  SIGKILL ${JSON.stringify(r.kills.sigkill)}, SIGTERM ${JSON.stringify(r.kills.sigterm)}, SIGSTOP ${JSON.stringify(r.kills.sigstop)}, redis paused ${r.kills.redisPauses}x, restarted empty ${r.kills.redisRestarts}x, MySQL stopped ${r.kills.mysqlStops}x, process starts ${r.processStarts}, longest SIGTERM stop ${JSON.stringify(r.longestStopMs)}`,
    `  executions: ${r.executions.ids} agentSessionIds, ${r.executions.runs} runs started, ${r.executions.stored} stored`,
    `  recovery closed every task ${r.recoveredWithinMs === null ? 'NOT within the quiet period' : `${r.recoveredWithinMs} ms into the quiet period`}`,
    `  error log lines ${JSON.stringify(r.errorLogs)}`,
    `  non-JSON output ${JSON.stringify(r.nonJsonLogs)}`,
    ...r.errorSamples.map((l) => `    ${l.slice(0, 1500)}`),
    r.violations.length ? `VIOLATED (${r.violations.length}):` : 'every invariant held',
    ...r.violations.map((v) => `  [${v.conversationId ?? '-'}] ${v.what}`),
  ];
  return lines.join('\n');
}
