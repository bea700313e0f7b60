import { createConnection } from 'mysql2/promise';
import { RunningSystem } from './system';
const { waitFor } = require('../scripts/lib/processes');

export { waitFor };

export interface StoredMessage {
  seq: number;
  role: 'user' | 'assistant';
  content: string;
  taskId: string | null;
  agentType: string | null;
}

/** The message log of a conversation exactly as MySQL holds it (no cache in between). */
export async function storedMessages(mysqlUrl: string, conversationId: string) {
  const conn = await createConnection(mysqlUrl);
  try {
    const [rows] = await conn.query(
      'SELECT item_index, state_data FROM loom_session_state ' +
        "WHERE session_id = ? AND state_key = 'messages' AND item_index > 0 ORDER BY item_index",
      [conversationId],
    );
    return (rows as Array<{ item_index: number; state_data: string }>).map((r) => ({
      ...(JSON.parse(r.state_data) as Omit<StoredMessage, 'seq'>),
      seq: Number(r.item_index),
    })) as StoredMessage[];
  } finally {
    await conn.end();
  }
}

/** How many entries the run index (tasks that may need recovery) holds in MySQL. */
export async function runIndexSize(mysqlUrl: string): Promise<number> {
  const conn = await createConnection(mysqlUrl);
  try {
    const [rows] = await conn.query(
      'SELECT COUNT(*) AS n FROM loom_session_state ' +
        "WHERE session_id = '_sys_task-runs' AND state_key LIKE 'run:%'",
    );
    return Number((rows as Array<{ n: number }>)[0].n);
  } finally {
    await conn.end();
  }
}

/** JSON log lines of `app` whose message starts with `msg` and that carry every given field. */
export function logLines(
  sys: RunningSystem,
  app: string,
  msg: string,
  fields: Record<string, string> = {},
): Array<Record<string, unknown>> {
  return sys
    .logs()
    .filter((l) => l.app === app && l.json && String(l.json.msg ?? '').startsWith(msg))
    .map((l) => l.json!)
    .filter((j) => Object.entries(fields).every(([k, v]) => j[k] === v));
}

/** Seqs are 1..n with no gap and no duplicate. */
export function contiguous(messages: Array<{ seq: number }>): boolean {
  return messages.every((m, i) => m.seq === i + 1);
}

/** With DEBUG_FAULTS=1: every process's messages in time order (noise left out). */
export function debugLogs(sys: RunningSystem): void {
  if (!process.env.DEBUG_FAULTS) return;
  const noise = /InstanceLoader|RouterExplorer|RoutesResolver|request completed/;
  const lines = sys
    .logs()
    .filter((l) => !noise.test(l.line))
    .map((l) => `${l.json?.time ?? ''} ${l.app} ${l.json?.msg ?? l.line}`)
    .sort();
  console.log(lines.join('\n'));
}
