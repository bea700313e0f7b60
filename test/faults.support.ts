import { createConnection } from 'mysql2/promise';
import { client, RunningSystem } from './system';
const { waitFor } = require('../scripts/lib/processes');

export { waitFor };

/** The answer to a same-key retry of a failed turn once the conversation has gone on. */
export const WENT_ON_CONFLICT = {
  statusCode: 409,
  code: 'CONFLICT',
  message:
    'this turn failed and the conversation has gone on since: send the message again under a new Idempotency-Key',
};

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

/**
 * A real MySQL failure at one point of a turn, without the orchestrator knowing of it: once
 * message `seq` of `conversationId` is committed, every later insert (an upsert too) of that
 * database whose state key is LIKE `keys` fails as a killed connection does (errno 1927, which
 * the store answers UNAVAILABLE), until the returned function lifts it. Loom's own `_sys_`
 * sessions are spared. A trigger on the suite's own database.
 */
export async function failWritesAfterMessage(
  mysqlUrl: string,
  conversationId: string,
  seq: number,
  keys = '%',
): Promise<() => Promise<void>> {
  const conn = await createConnection(mysqlUrl);
  try {
    await conn.query(
      'CREATE TABLE IF NOT EXISTS loom_test_fault ' +
        '(conversation_id VARCHAR(128) PRIMARY KEY, seq INT NOT NULL, state_keys VARCHAR(191) NOT NULL)',
    );
    await conn.query('REPLACE INTO loom_test_fault VALUES (?, ?, ?)', [conversationId, seq, keys]);
    await conn.query('DROP TRIGGER IF EXISTS loom_test_fault');
    await conn.query(
      `CREATE TRIGGER loom_test_fault BEFORE INSERT ON loom_session_state FOR EACH ROW
       BEGIN
         IF NEW.session_id NOT LIKE '\\_sys\\_%' AND EXISTS (
           SELECT 1 FROM loom_test_fault f JOIN loom_session_state m
             ON m.session_id = f.conversation_id AND m.state_key = 'messages' AND m.item_index = f.seq
           WHERE NEW.state_key LIKE f.state_keys) THEN
           SIGNAL SQLSTATE '70100' SET MYSQL_ERRNO = 1927, MESSAGE_TEXT = 'Connection was killed (test fault)';
         END IF;
       END`,
    );
  } finally {
    await conn.end();
  }
  return async () => {
    const lift = await createConnection(mysqlUrl);
    try {
      await lift.query('DROP TRIGGER IF EXISTS loom_test_fault');
      await lift.query('DELETE FROM loom_test_fault');
    } finally {
      await lift.end();
    }
  };
}

/**
 * A deployment that has run, then lost its specialist: labor-law answers a turn (so every
 * orchestrator has it in its catalog), its one instance is stopped, and the registry no longer
 * lists it.
 */
export async function stopLaborLawAfterAnAnswer(
  sys: RunningSystem,
  alice: ReturnType<typeof client>,
): Promise<void> {
  const warm = (await alice('POST', '/v1/conversations', {})).body.conversationId;
  const t = await alice('POST', `/v1/conversations/${warm}/messages`, {
    content: '劳动合同问题',
  });
  if (t.body.reply?.agentType !== 'labor-law')
    throw new Error(`labor-law did not answer the warm-up turn: ${JSON.stringify(t.body)}`);
  await sys.kill(sys.processes('labor-law-agent')[0], 'SIGTERM');
  await waitFor(
    async () =>
      !(await alice('GET', '/v1/agents')).body.items.some(
        (a: { agentType: string }) => a.agentType === 'labor-law',
      ),
    { what: 'labor-law to leave the registry', timeoutMs: 20_000 },
  );
}
