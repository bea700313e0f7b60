import Redis from 'ioredis';
import { createConnection } from 'mysql2/promise';
import { ChaosCluster } from './chaos-cluster';
import { ConversationRecord } from './chaos-client';

export interface Violation {
  conversationId: string | null;
  what: string;
}

interface Row {
  session_id: string;
  state_key: string;
  item_index: number;
  state_data: string;
}

/** Everything MySQL holds for the run (no cache in between). */
async function durableRows(mysqlUrl: string): Promise<Row[]> {
  const conn = await createConnection(mysqlUrl);
  try {
    const [rows] = await conn.query(
      'SELECT session_id, state_key, item_index, state_data FROM loom_session_state ' +
        "WHERE state_key = 'messages' OR state_key LIKE 'task:%' OR state_key LIKE 'agent:%' " +
        "OR (session_id = '_sys_task-runs' AND state_key LIKE 'run:%')",
    );
    return rows as Row[];
  } finally {
    await conn.end();
  }
}

/** Tasks still RUNNING and run-index entries, which the quiet period waits to see gone. */
export async function openWork(mysqlUrl: string): Promise<{ running: string[]; runIndex: number }> {
  const rows = await durableRows(mysqlUrl);
  const running = rows
    .filter(
      (r) => /^task:[^:]+$/.test(r.state_key) && JSON.parse(r.state_data).status === 'RUNNING',
    )
    .map((r) => `${r.session_id}/${r.state_key}`);
  return { running, runIndex: rows.filter((r) => r.session_id === '_sys_task-runs').length };
}

/** The invariants of a run that lost nothing (checked after the quiet period). */
export async function checkInvariants(
  cluster: ChaosCluster,
  records: ConversationRecord[],
  token: string,
): Promise<Violation[]> {
  const out: Violation[] = [];
  const rows = await durableRows(cluster.mysqlUrl);
  const tasks = new Map<string, { status: string; conversationId: string }>();
  for (const r of rows)
    if (/^task:[^:]+$/.test(r.state_key))
      tasks.set(r.state_key.slice(5), {
        status: JSON.parse(r.state_data).status,
        conversationId: r.session_id,
      });
  for (const [id, t] of tasks)
    if (t.status === 'RUNNING')
      out.push({ conversationId: t.conversationId, what: `task ${id} left RUNNING` });
  const runs = rows.filter((r) => r.session_id === '_sys_task-runs');
  if (runs.length)
    out.push({ conversationId: null, what: `${runs.length} run-index entries left` });

  // Agent sessions of closed tasks: deleted when the task closes.
  for (const r of rows.filter((x) => x.state_key.startsWith('agent:'))) {
    const taskId = JSON.parse(r.state_data).taskId as string;
    if (tasks.get(taskId)?.status !== 'RUNNING')
      out.push({
        conversationId: r.session_id,
        what: `agent session ${r.state_key} of closed task ${taskId} left in MySQL`,
      });
  }
  const agentKeys = await redisAgentKeys(cluster);
  for (const k of agentKeys)
    out.push({ conversationId: null, what: `agent session key left in Redis: ${k}` });

  for (const rec of records) {
    const id = rec.conversationId;
    const stored = rows
      .filter((r) => r.session_id === id && r.state_key === 'messages' && r.item_index > 0)
      .map((r) => ({ seq: Number(r.item_index), ...JSON.parse(r.state_data) }))
      .sort((a, b) => a.seq - b.seq) as Array<{
      seq: number;
      role: string;
      content: string;
      taskId: string | null;
    }>;
    const bad = (what: string) => out.push({ conversationId: id, what });
    if (!stored.every((m, i) => m.seq === i + 1))
      bad(`seqs not contiguous: ${stored.map((m) => m.seq).join(',')}`);
    let lastSeq = 0;
    for (const t of rec.acked) {
      const users = stored.filter((m) => m.role === 'user' && m.content === t.content);
      const replies = stored.filter((m) => m.role === 'assistant' && m.taskId === t.taskId);
      if (users.length !== 1)
        bad(`acked turn "${t.content}" has its user message stored ${users.length} times`);
      if (replies.length !== 1)
        bad(`acked task ${t.taskId} has its reply stored ${replies.length} times`);
      if (users[0] && users[0].seq !== t.userSeq)
        bad(`acked user message at seq ${users[0].seq}, answered ${t.userSeq}`);
      if (replies[0] && (replies[0].seq !== t.replySeq || replies[0].content !== t.reply))
        bad(
          `acked reply of ${t.taskId} stored at ${replies[0].seq} differs from the one answered (seq ${t.replySeq})`,
        );
      if (t.userSeq <= lastSeq || t.replySeq <= t.userSeq)
        bad(`acked turn ${t.key} out of order (${t.userSeq}, ${t.replySeq})`);
      lastSeq = t.replySeq;
      if (tasks.get(t.taskId)?.status !== 'COMPLETED')
        bad(`acked task ${t.taskId} is ${tasks.get(t.taskId)?.status}`);
    }
    for (const c of rec.unacked) {
      const n = stored.filter((m) => m.role === 'user' && m.content === c).length;
      if (n > 1) bad(`unacknowledged message "${c}" stored ${n} times`);
    }
    // Every reply follows its own user message.
    for (const m of stored.filter((x) => x.role === 'assistant')) {
      const u = stored.find((x) => x.role === 'user' && x.taskId === m.taskId);
      if (!u || u.seq > m.seq) bad(`reply at seq ${m.seq} without its user message before it`);
    }
    await checkApi(cluster, id, stored, rec, token, bad);
  }
  return out;
}

/** The API (both replicas, through every tier) tells what MySQL holds and what was acknowledged. */
async function checkApi(
  cluster: ChaosCluster,
  id: string,
  stored: Array<{ seq: number; role: string; content: string }>,
  rec: ConversationRecord,
  token: string,
  bad: (what: string) => void,
): Promise<void> {
  const get = async (base: string, path: string) => {
    const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: (await res.json()) as any };
  };
  for (const base of cluster.bases) {
    const conv = await get(base, `/v1/conversations/${id}`);
    if (conv.status !== 200) {
      bad(`GET conversation answered ${conv.status}`);
      continue;
    }
    if (conv.body.messageCount !== stored.length)
      bad(`GET conversation: messageCount ${conv.body.messageCount}, stored ${stored.length}`);
    if (conv.body.activeTaskIds.length)
      bad(`GET conversation: active tasks ${conv.body.activeTaskIds}`);
    const listed: Array<{ seq: number; role: string; content: string }> = [];
    for (let after = 0; ;) {
      const page = await get(base, `/v1/conversations/${id}/messages?afterSeq=${after}&limit=200`);
      if (page.status !== 200 || !page.body.items.length) break;
      listed.push(...page.body.items);
      after = page.body.items[page.body.items.length - 1].seq;
    }
    const same =
      listed.length === stored.length &&
      listed.every((m, i) => m.seq === stored[i].seq && m.content === stored[i].content);
    if (!same)
      bad(
        `GET messages (${base}) lists ${listed.length}, MySQL holds ${stored.length} or they differ`,
      );
    for (const t of rec.acked) {
      const task = await get(base, `/v1/tasks/${t.taskId}`);
      if (task.status !== 200 || task.body.status !== 'COMPLETED')
        bad(`GET task ${t.taskId} (${base}): ${task.status} ${task.body?.status}`);
    }
  }
}

async function redisAgentKeys(cluster: ChaosCluster): Promise<string[]> {
  const sessions: string[] = [];
  // Node by node: a cluster's keys are spread over its masters.
  for (const url of cluster.redis.nodeUrls) {
    const redis = new Redis(url, { lazyConnect: true });
    try {
      await redis.connect();
      const found: string[] = [];
      let cursor = '0';
      do {
        const [next, keys] = await redis.scan(
          cursor,
          'MATCH',
          `${cluster.prefix}s:*:agent:*`,
          'COUNT',
          1000,
        );
        cursor = next;
        // Tombstones and write records name an agent session's key; they hold none.
        found.push(...keys.filter((k) => !k.includes(':_gone:') && !k.includes(':_writing:')));
      } while (cursor !== '0');
      // An absent marker is not a session; a value is. (GETs: an MGET across slots is refused.)
      const pipeline = redis.pipeline();
      for (const k of found) pipeline.get(k);
      const values = found.length ? ((await pipeline.exec()) ?? []).map(([, v]) => v) : [];
      sessions.push(...found.filter((_, i) => values[i] !== null && values[i] !== '\u0000absent'));
    } finally {
      redis.disconnect();
    }
  }
  return sessions;
}
