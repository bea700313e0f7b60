import { createConnection } from 'mysql2/promise';
import { AppProcess, RunningSystem } from './system';
const { waitFor } = require('../scripts/lib/processes');

/** Every task row of the database with its status and lease, as MySQL holds it. */
export async function storedTasks(
  mysqlUrl: string,
): Promise<Array<{ taskId: string; conversationId: string; status: string; lease: any }>> {
  const conn = await createConnection(mysqlUrl);
  try {
    const [rows] = await conn.query(
      'SELECT session_id, state_data FROM loom_session_state ' +
        "WHERE state_key LIKE 'task:%' AND state_key NOT LIKE '%:shared' AND item_index = 0",
    );
    return (rows as Array<{ session_id: string; state_data: string }>).map((r) => {
      const t = JSON.parse(r.state_data);
      return { taskId: t.taskId, conversationId: r.session_id, status: t.status, lease: t.lease };
    });
  } finally {
    await conn.end();
  }
}

/** Log lines at level error or above, and lines that are not JSON (a crash trace). */
export function errorLines(sys: RunningSystem): string[] {
  return sys
    .logs()
    .filter((l) => !l.json || Number(l.json.level ?? 0) >= 50)
    .map((l) => `${l.app}: ${l.line.slice(0, 300)}`);
}

/** Starts an orchestrator on `port` and waits until it answers /health. */
export async function startOrchestrator(
  sys: RunningSystem,
  port: number,
  env: Record<string, string> = {},
): Promise<AppProcess> {
  const child = sys.start('orchestrator', { PORT: String(port), ...env });
  await waitFor(
    async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => null))?.ok,
    { what: `orchestrator on ${port}`, intervalMs: 50, timeoutMs: 60_000 },
  );
  return child;
}
