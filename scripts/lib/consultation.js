// API.md's demo consultation, played over HTTP against a running orchestrator.
const CONSULTATIONS = [
  {
    language: '中文',
    turns: ['我跟公司签的劳动合同有问题', '上面那份合同里关于竞业协议的部分怎么看?'],
  },
  {
    language: 'English',
    turns: [
      'My employment contract with my company has a problem',
      'What about the non-compete clause in that contract?',
    ],
  },
  { language: '中文 (contract law)', turns: ['我租房的租赁合同到期了，房东不退押金怎么办'] },
];

async function api(base, token, method, path, body) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (res.status >= 400) throw new Error(`${method} ${path} → ${res.status} ${text}`);
  return json;
}

/** Plays every consultation; returns the transcript rows (also printed when `print`). */
async function playConsultation(base, token, { print = true } = {}) {
  const rows = [];
  const out = (s) => print && process.stdout.write(`${s}\n`);
  for (const c of CONSULTATIONS) {
    const conv = await api(base, token, 'POST', '/v1/conversations', {});
    out(`\n=== ${c.language} — conversation ${conv.conversationId}`);
    for (const content of c.turns) {
      const turn = await api(
        base,
        token,
        'POST',
        `/v1/conversations/${conv.conversationId}/messages`,
        { content },
      );
      const task = await api(base, token, 'GET', `/v1/tasks/${turn.taskId}`);
      const specialist = task.executions.find((e) => e.agentType === turn.reply.agentType);
      const research = task.sharedContext['research.statutes'];
      out(`\nuser #${turn.userMessage.seq}: ${content}`);
      out(
        `  plan: ${task.plan.map((p) => `${p.agentType}${p.required ? '' : ' (optional)'}`).join(' → ')}`,
      );
      out(
        `  answered by: ${turn.reply.agentType}; it saw ${specialist?.context.historyMessages ?? 0} earlier messages, shared keys: ${(specialist?.context.sharedKeys ?? []).join(', ') || 'none'}`,
      );
      if (research)
        out(
          `  research.statutes written by ${research.writer}: ${research.value
            .map((s) => (c.language === 'English' ? s.title.en : s.title.zh))
            .join(c.language === 'English' ? '; ' : '、')}`,
        );
      out(`assistant #${turn.reply.seq}: ${turn.reply.content}`);
      rows.push({ conversationId: conv.conversationId, content, turn, task });
    }
  }
  return rows;
}

module.exports = { CONSULTATIONS, playConsultation, api };
